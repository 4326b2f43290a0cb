"""The build cache under /var/cache/skyrack: one directory per built thing, keyed by its recipe.

An entry is `<root>/<component>/<version>-<recipe hash>/` holding the outputs and a
`meta.json` (recipe, seconds taken, size). It is built in a sibling `.partial-<pid>`
directory and renamed into place only when complete, so an interrupted or failed build
leaves no entry (only a partial directory, which the next build removes). A new recipe of
the same version replaces the older entry. A lock per
component keeps two builds of the same thing from racing. The time each build took is
kept in `history.json`, so the next cold build can show an estimate.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(os.environ.get("SKYRACK_CACHE", "/var/cache/skyrack"))
Say = Callable[[str], None]


class BuildError(RuntimeError):
    """A component failed to build; the message names it and its log."""


def recipe_key(recipe: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Entry:
    component: str
    version: str
    recipe: dict[str, Any]
    root: Path = ROOT

    @property
    def path(self) -> Path:
        return self.root / "build" / self.component / f"{self.version}-{recipe_key(self.recipe)}"

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    def ready(self) -> bool:
        return self.meta_path.is_file()

    def meta(self) -> dict[str, Any]:
        return json.loads(self.meta_path.read_text())

    def log(self) -> Path:
        d = self.root / "build" / "logs"
        d.mkdir(parents=True, exist_ok=True)
        return d / f"{self.component}-{self.version}.log"


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


@contextlib.contextmanager
def locked(lock: Path) -> Iterator[None]:
    """Hold an exclusive flock on `lock` (made if missing): one process at a time makes what it guards."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _locked(entry: Entry) -> contextlib.AbstractContextManager[None]:
    return locked(entry.path.parent / ".lock")


def history(root: Path = ROOT) -> dict[str, float]:
    try:
        return json.loads((root / "build" / "history.json").read_text())
    except (OSError, ValueError):
        return {}


def _remember(entry: Entry, seconds: float) -> None:
    data = history(entry.root)
    data[entry.component] = round(seconds, 1)
    path = entry.root / "build" / "history.json"
    tmp = path.with_name(f".history.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def ensure(entry: Entry, build: Callable[[Path], None], say: Say) -> Path:
    """The entry's directory, calling `build(partial_dir)` first if it is not cached."""
    if entry.ready():
        return entry.path
    with _locked(entry):
        if entry.ready():  # another process built it while we waited
            return entry.path
        for stale in entry.path.parent.glob(f"{entry.path.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
        partial = entry.path.with_name(f"{entry.path.name}.partial-{os.getpid()}")
        partial.mkdir(parents=True)
        started = time.monotonic()
        try:
            build(partial)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        seconds = time.monotonic() - started
        meta = {"component": entry.component, "version": entry.version, "recipe": entry.recipe,
                "seconds": round(seconds, 1), "bytes": _size(partial)}
        (partial / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        shutil.rmtree(entry.path, ignore_errors=True)
        partial.rename(entry.path)
        _remember(entry, seconds)
        for old in entry.path.parent.glob(f"{entry.version}-*"):  # the same version by an older recipe
            if old != entry.path and not old.name.count(".partial-") and (old / "meta.json").exists():
                shutil.rmtree(old, ignore_errors=True)
        say(f"{entry.component} {entry.version}: built in {fmt_seconds(seconds)} "
            f"({meta['bytes'] / 2**20:.0f} MiB, cached in {entry.path})")
    return entry.path


def fmt_seconds(s: float) -> str:
    s = round(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
