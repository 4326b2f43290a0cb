"""Loading an environment file: its YAML validated against the schema and the cross-field rules.

`load` raises `InputError` listing *every* problem as ``file: path.to.field: what is wrong``
(pydantic's errors translated, with 'did you mean' hints for unknown keys), at most
MAX_PROBLEMS of them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import InputError, Problem, format_path
from .schema import MAX_PROBLEMS, Environment
from .semantics import semantic_problems
from .yaml_file import read_yaml


def _known_keys(loc: tuple, root: type[BaseModel] = Environment) -> list[str]:
    """The keys allowed at a location of a `root` document, for 'did you mean' hints on typos."""
    model: Any = root
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return []
        ann = field.annotation
        for cand in (ann, *getattr(ann, "__args__", ())):
            inner = getattr(cand, "__args__", (cand,))
            for c in (cand, *inner):
                if isinstance(c, type) and issubclass(c, BaseModel):
                    model = c
                    break
            else:
                continue
            break
        else:
            return []
    return list(model.model_fields) if hasattr(model, "model_fields") else []


def pydantic_problems(label: str, exc: ValidationError, root: type[BaseModel] = Environment) -> list[Problem]:
    """A validation error of a `root` document (an environment, a job file) as `file: field: what` problems."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = format_path(loc)
        if err["type"] == "extra_forbidden":
            hint = difflib.get_close_matches(str(loc[-1]), _known_keys(loc, root), n=1)
            msg = "unknown key" + (f" (did you mean '{hint[0]}'?)" if hint else "")
        elif err["type"] == "missing":
            msg = "required but missing"
        else:
            msg = err["msg"].removeprefix("Value error, ")
            if "input" in err and err["type"] not in ("value_error",) and not isinstance(err["input"], dict):
                got = repr(err["input"])
                msg += f" (got {got if len(got) <= 80 else got[:77] + '...'})"
        problems.append(Problem(label, path, msg))
    return problems


# Keys an earlier skyrack read and this one does not, with what became of them. A file that still has one
# is refused with that reason (not a bare "unknown key"); `skyrack diff` reads a base revision's file with
# them dropped, so the pull request that removes them can be reviewed (`retired="drop"`).
RETIRED = {
    ("cluster", "versions", "scheduler_plugins"):
        "gang scheduling is kube-scheduler's own since Kubernetes 1.37 (skyrack.scheduler): no scheduler-plugins "
        "image runs; delete this key",
    ("cluster", "gang_permit_wait_seconds"):
        "kube-scheduler's GangScheduling has a fixed permit timeout (5 minutes), not a setting; delete this key",
}


def _retired(label: str, data: dict, drop: bool) -> list[Problem]:
    problems = []
    for path, why in RETIRED.items():
        parent: Any = data
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and path[-1] in parent:
            if drop:
                del parent[path[-1]]
            else:
                problems.append(Problem(label, format_path(path), f"no longer a setting: {why}"))
    return problems


def load(path: str | Path, text: str | None = None, base: bool = False,
         read: Callable[[str], str | None] | None = None) -> Environment:
    """Load and fully validate an environment file. Raises InputError with every problem.

    `base`: the file as a revision under review had it (`skyrack diff`'s base side): the keys in RETIRED are
    ignored instead of refused, and a lab's versions need not be ones this code builds (that revision's
    code built them). `read`: how a file the environment names by a relative path (`mirrors.ca`) is read,
    given that path, when the file is not on disk but at a revision (None: no such file); default: from disk."""
    path = Path(path)
    label = str(path)
    data = read_yaml(path, text)
    if not isinstance(data, dict):
        raise InputError([Problem(label, "", "expected a mapping of keys at the top level")])
    problems = _retired(label, data, drop=base)
    if problems:
        raise InputError(problems)
    try:
        env = Environment.model_validate(data, context={"base_dir": path.parent, "read": read})
    except ValidationError as exc:
        raise InputError(_capped(label, pydantic_problems(label, exc))) from None
    except RecursionError:
        raise InputError([Problem(label, "", "nested too deeply")]) from None
    problems = [Problem(label, p, m) for p, m in semantic_problems(env, path.name, builds=not base)]
    if problems:
        raise InputError(_capped(label, problems))
    return env


def _capped(label: str, problems: list[Problem]) -> list[Problem]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return [*problems[:MAX_PROBLEMS], Problem(label, "", f"{len(problems) - MAX_PROBLEMS} more problems not shown")]
