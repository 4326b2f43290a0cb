"""Each revision's own derivation of its environments (`derive`), run with that revision's code.

A side runs in this process when the code it would run is the code already loaded: the
repository carries no `skyrack` package (an environments-only repository using an
installed skyrack), or the loaded package is the working tree's and the side's code is
the same (`git diff`: nothing under `modules/`, `ansible/`, `stacks/` differs). Otherwise
the revision is copied to a temporary directory (`git archive`; the working tree's files
git does not ignore) and `python -m skyrack.gitops.derive` runs there with its
`modules/` first on the path. `derive.py` itself is this process's, copied over the
revision's (one format of facts at both sides; a revision older than it gets it too):
what it calls, the plan, the renderers, the templates and the roles, is the revision's.
Both sides' subprocesses run at once; their output goes to a file, not a pipe.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import skyrack

from ..errors import InputError
from . import derive
from .git import Repo

CODE_DIRS = ("modules/", "ansible/", "stacks/")  # what a derivation reads besides configs/
LOADED = Path(skyrack.__file__).resolve().parent


def code_changes(changed: list[str]) -> list[str]:
    return [p for p in changed if p.startswith(CODE_DIRS)]


def runs_loaded_code(repo: Repo, rev: str | None) -> bool:
    """Whether the code rev would derive with is the code this process has loaded."""
    if repo.read(rev, "modules/skyrack/__init__.py") is None:
        return True  # no package in the repository: the installed one runs either way
    if LOADED != (repo.root / "modules/skyrack").resolve():
        return False
    return rev is None or not code_changes(repo.changed(rev, None))


@dataclass
class Derivation:
    """The facts of some environments at one revision: started at once, collected by `facts`."""

    repo: Repo
    rev: str | None
    label: str
    paths: list[str]
    in_process: bool
    _proc: subprocess.Popen[bytes] | None = None
    _out: Any = None  # the subprocess's stdout file
    _tmp: tempfile.TemporaryDirectory[str] | None = None
    _result: dict[str, Any] | None = field(default=None, repr=False)

    @classmethod
    def start(cls, repo: Repo, rev: str | None, label: str, paths: list[str]) -> Derivation:
        d = cls(repo, rev, label, paths, in_process=not paths or runs_loaded_code(repo, rev))
        if not d.in_process:
            try:
                d._spawn()
            except (OSError, InputError) as exc:  # reported per environment, like a crash
                d._fail(f"{exc}")
        return d

    def _fail(self, why: str) -> None:
        self._result = {p: {"failed": f"the derivation of {self.label} failed ({why})"} for p in self.paths}
        if self._tmp is not None:
            self._tmp.cleanup()

    def _spawn(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="skyrack-diff-")
        tree = Path(self._tmp.name) / "tree"
        tree.mkdir()
        self.repo.export(self.rev, tree)
        package = tree / "modules/skyrack"
        # The glue is this process's derive.py at both sides (one format of facts, also for a revision that
        # predates it); everything it calls (plan, renderers, templates, roles) is the revision's own.
        glue = package / "gitops/derive.py"
        glue.parent.mkdir(parents=True, exist_ok=True)
        (glue.parent / "__init__.py").touch()
        shutil.copy(derive.__file__, glue)
        self._out = out = open(Path(self._tmp.name) / "facts.json", "wb")  # closed by _collect
        env = {**os.environ, "PYTHONPATH": str(tree / "modules"), "PYTHONDONTWRITEBYTECODE": "1"}
        self._proc = subprocess.Popen([sys.executable, "-m", "skyrack.gitops.derive", *self.paths], cwd=tree,
                                      env=env, stdout=out, stderr=subprocess.PIPE)

    def _collect(self) -> dict[str, Any]:
        if self._result is None:
            assert self._proc is not None and self._tmp is not None
            _, err = self._proc.communicate()
            self._out.close()
            try:
                if self._proc.returncode != 0:
                    raise ValueError(f"exit {self._proc.returncode}: "
                                     + (err.decode(errors="replace").strip().splitlines() or [""])[-1])
                self._result = json.loads((Path(self._tmp.name) / "facts.json").read_text())["environments"]
            except (ValueError, KeyError) as exc:
                self._fail(str(exc))
            finally:
                self._tmp.cleanup()
        return self._result

    def facts(self, path: str, plan: Any, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
        """The facts of the environment at path; `plan` (a callable) gives the plan in-process, where the
        families in skip are not derived."""
        if self.in_process:
            where = derive.Where(path, lambda p: self.repo.read(self.rev, p), derive.code_root())
            return derive.facts(plan(), where, skip)
        return self._collect().get(path) or {"failed": f"{path} was not derived at {self.label}"}

    def close(self) -> None:
        if self._proc is not None and self._result is None:
            self._proc.kill()
            self._collect()
