"""What every `skyrack` command shares: naming an environment, `--json`, reporting errors.

A leaf of the command line: the subcommand modules (`skyrack.lab.cli`, `skyrack.etcd.cli`,
`skyrack.join.cli`, `skyrack.kube.cli`, `skyrack.gitops.commands`) and `skyrack.cli` import
it; it imports only the core's errors, files and terminal helpers. Nothing below the command line
imports it (an import-linter contract in pyproject.toml).

- An environment is named one way everywhere: a name (`lab` is `configs/lab.yaml`) or a
  path to its `.yaml` file. A file that is not a `.yaml` file is never read.
- With `--json`, stdout is one JSON document with `ok`, also on failure:
  ``{"ok": false, "error": "...", ...}``; the exit code is the same as without.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from .errors import EXIT_INPUT, InputError, Problem
from .files import is_env_file
from .term import safe

CONFIGS = Path("configs")
DEFAULT_ENV = CONFIGS / "lab.yaml"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # an environment's name: a DNS-1123 label

out = Console(highlight=False, soft_wrap=True, emoji=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
T = TypeVar("T")


def environments(configs: Path = CONFIGS) -> list[str]:
    """The environments in a configs directory, by name."""
    try:
        return sorted(p.name[:-5] for p in configs.iterdir() if is_env_file(p.name) and p.is_file())
    except OSError:
        return []


def env_files(paths: list[Path]) -> list[Path]:
    """The environments among paths a glob gave (`configs/*.yaml`): lock files and Pulumi's stack settings left out."""
    return [p for p in paths if not (p.name.endswith(".yaml") and not is_env_file(p.name))]


def env_path(value: str | Path) -> Path:
    """An environment as the command line names it: a name (configs/<name>.yaml) or a path.

    A name that is not there, or a file not named `*.yaml`, is refused before anything is read
    (`skyrack validate dev` never parses the repository's `./dev` script). Whatever else is wrong
    with a path (missing, a directory, a device, not YAML) the loader reports, as for any file.
    """
    text = str(value)
    if _NAME.fullmatch(text):
        path = CONFIGS / f"{text}.yaml"
        if not path.is_file():
            known = environments()
            raise InputError([Problem(text, "", f"no environment {text!r}: {path} does not exist (environments in "
                                                f"{CONFIGS}/: {', '.join(known) if known else 'none'}; or give "
                                                "the path of a .yaml file)")])
        return path
    path = Path(text)
    if not path.name.endswith(".yaml") and path.is_file():
        stem = path.name.split(".")[0] or "<name>"
        raise InputError([Problem(text, "name", f"an environment file is named {stem}.yaml, not {path.name!r}: "
                                                "give an environment's name (configs/<name>.yaml) or its .yaml file")])
    return path


_ENV_HELP = "An environment: its name (lab is configs/lab.yaml) or the path of its .yaml file."
EnvArg = Annotated[Path, typer.Argument(help=_ENV_HELP, parser=env_path, metavar="ENV", show_default=True)]
ENVS_HELP = "Environments: names (lab is configs/lab.yaml) or paths of .yaml files."
EnvsArg = Annotated[list[Path] | None, typer.Argument(help=ENVS_HELP[:-1] + " (default: lab).", parser=env_path,
                                                      metavar="ENV...")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout (with `ok`, also on errors).")]


def failure(problems: list[Problem] | None = None, error: str | None = None, **extra: Any) -> dict[str, Any]:
    """The JSON document of a failed command: `ok` false, `error` one message, `problems` when there are any."""
    doc: dict[str, Any] = {"ok": False, "error": error or "\n".join(str(p) for p in problems or [])}
    if problems is not None:
        doc["problems"] = [p.as_dict() for p in problems]
    return {**doc, **extra}


def fail(problems: list[Problem], as_json: bool = False) -> typer.Exit:
    """Report problems (stderr, or a JSON document on stdout) and return Exit(1) to raise."""
    if as_json:
        dump_json(failure(problems))
    else:
        for p in problems:
            err.print(f"[red]error[/red] {safe(p)}", markup=True, highlight=False)
    return typer.Exit(EXIT_INPUT)


def guarded(fn: Callable[[], T], as_json: bool = False, errors: tuple[type[Exception], ...] = ()) -> T:
    """Run fn; report InputError (file: field: message) or one of `errors` (a run that went wrong)
    without a traceback, and exit 1."""
    try:
        return fn()
    except InputError as exc:
        raise fail(exc.problems, as_json) from None
    except typer.Exit:
        raise  # click's Exit is a RuntimeError: never report it as a failure of its own
    except errors as exc:
        if as_json:
            dump_json(failure(error=str(exc)))
        else:
            err.print(f"[red]error[/red] {safe(exc)}")
        raise typer.Exit(EXIT_INPUT) from None


def dump_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def ok(data: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """The JSON document of a command that succeeded: `ok` first, then what it says."""
    return {"ok": True, **(data or {}), **fields}
