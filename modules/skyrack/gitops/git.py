"""Environment files at a git revision, or in the working tree, read with the git CLI.

`git ls-tree` lists a revision's files and `git cat-file` reads one: plain subprocess
calls (a few per environment), no library needed. A revision of None is the working tree.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path, PurePosixPath

from ..errors import InputError, Problem
from ..files import is_env_file


def lock_name(env_path: str) -> str:
    p = PurePosixPath(env_path)
    return str(p.with_name(p.stem + ".lock.yaml"))


class Repo:
    """A git repository and the directory of environment files inside it."""

    def __init__(self, cwd: Path, configs: Path):
        self.cwd = cwd
        top = self._git("rev-parse", "--show-toplevel", cwd=cwd, missing=None)
        if top is None:
            raise InputError([Problem(str(cwd), "", "not inside a git repository (`skyrack diff` compares revisions)")])
        self.root = Path(top.strip())
        try:
            self.configs = str(PurePosixPath((cwd / configs).resolve().relative_to(self.root.resolve())))
        except ValueError:
            raise InputError([Problem(str(configs), "", f"is outside the repository {self.root}")]) from None

    def _git(self, *args: str, cwd: Path | None = None, missing: str | None = "") -> str | None:
        proc = subprocess.run(["git", *args], cwd=cwd or self.root, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            return missing
        return proc.stdout

    def resolve(self, rev: str) -> str:
        """The commit a revision names; a clear error when there is none."""
        sha = self._git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", missing=None)
        if sha is None:
            raise InputError([Problem(rev, "", f"no such revision in {self.root} (in CI, fetch the history: "
                                               "actions/checkout with fetch-depth: 0)")])
        return sha.strip()

    def env_files(self, rev: str | None) -> list[str]:
        """Repository-relative paths of the environment files at rev (None: the working tree)."""
        if rev is None:
            folder = self.root / self.configs
            try:
                names = sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
            except OSError as exc:
                raise InputError([Problem(self.configs, "", f"cannot be read: {exc.strerror or exc}")]) from None
        else:
            listing = self._git("ls-tree", "--name-only", "-z", rev, "--", self.configs + "/") or ""
            names = sorted(PurePosixPath(p).name for p in listing.split("\0") if p)
        return [str(PurePosixPath(self.configs) / n) for n in names if is_env_file(n)]

    def read(self, rev: str | None, path: str) -> str | None:
        """A file's text at rev, None if it does not exist there."""
        if rev is None:
            file = self.root / path
            return file.read_text() if file.is_file() else None
        return self._git("cat-file", "blob", f"{rev}:{path}", missing=None)

    def changed(self, base: str, head: str | None) -> list[str]:
        """Repository-relative paths that differ between two revisions (head None: the working tree,
        its untracked files included)."""
        out = self._git("diff", "--name-only", "--no-renames", "-z", base, *([head] if head else [])) or ""
        if head is None:
            out += self._git("ls-files", "--others", "--exclude-standard", "-z") or ""
        return sorted({p for p in out.split("\0") if p})

    def export(self, rev: str | None, dest: Path) -> None:
        """Write the files of rev (None: the working tree's files git does not ignore) under dest."""
        if rev is not None:
            proc = subprocess.Popen(["git", "archive", "--format=tar", rev], cwd=self.root, stdout=subprocess.PIPE)
            assert proc.stdout is not None
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                tar.extractall(dest, filter="data")
            if proc.wait() != 0:
                raise InputError([Problem(rev, "", f"git archive failed in {self.root}")])
            return
        listing = self._git("ls-files", "--cached", "--others", "--exclude-standard", "-z") or ""
        for rel in (p for p in listing.split("\0") if p):
            src, dst = self.root / rel, dest / rel
            if src.is_file() or src.is_symlink():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst, follow_symlinks=False)
