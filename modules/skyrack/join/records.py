"""Run records: one directory per rack run under `runs/`, with ansible-runner's artifacts and a summary.

`runs/<UTC time>-<env>-<rack>/summary.json` says, per host, the counts, the result and
the first error, and per host what was skipped and why. `--retry-failed` reads the
newest record of each rack to know which hosts to run again. After each run the rack's
oldest records beyond `--keep-runs` are removed (never the run just made).

Records are private: `runs/` and every run directory are 0700, every file skyrack writes
there is 0600, and ansible-runner writes its artifacts under a 0077 umask.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import InputError, os_problem
from ..files import write_private

COUNTS = ("ok", "changed", "skipped", "failed", "unreachable")


@dataclass
class HostResult:
    host: str
    rack: str
    ok: int = 0
    changed: int = 0
    skipped: int = 0
    failed: int = 0
    unreachable: int = 0
    result: str = "not run"  # ok | failed | unreachable | not run
    message: str = ""
    report: list[dict[str, str]] = field(default_factory=list)  # item, status, reason

    @property
    def bad(self) -> bool:
        return self.result != "ok"


@dataclass
class RackRun:
    env: str
    rack: str
    check: bool
    record: str  # the run directory
    started: float  # Unix time
    ended: float = 0.0
    seconds: float = 0.0
    rc: int = 0
    status: str = ""  # ansible-runner's: successful | failed | timeout | canceled
    tags: list[str] = field(default_factory=list)  # --tags: only these roles ran (empty: every role)
    via: str = "local"  # or "receptor:<execution node>"
    playbook: str = "join.yml"  # or leave.yml: the reset of nodes that leave (departures.py)
    hosts: list[HostResult] = field(default_factory=list)

    @property
    def failed_hosts(self) -> list[str]:
        return [h.host for h in self.hosts if h.bad]

    def to_dict(self) -> dict:
        return {**asdict(self), "failed_hosts": self.failed_hosts}


def new_dir(runs: Path, env: str, rack: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    base = runs / f"{stamp}-{env}-{rack}"
    d, i = base, 1
    try:
        runs.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(runs, 0o700)
        while True:
            try:
                d.mkdir(mode=0o700)
                break
            except FileExistsError:
                i += 1
                d = base.with_name(f"{base.name}.{i}")
    except OSError as exc:
        raise InputError([os_problem(str(runs), exc, "cannot write run records")]) from None
    return d


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Files and directories made meanwhile (ansible-runner's artifacts) are private to the owner."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def save(run: RackRun) -> None:
    write_private(Path(run.record) / "summary.json", json.dumps(run.to_dict(), indent=2) + "\n")


def _summary(d: Path) -> dict | None:
    try:
        return json.loads((d / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def rack_records(runs: Path, env: str, rack: str) -> list[Path]:
    """The record directories of this rack's runs (new_dir's names; a summary must agree), oldest first."""
    if not runs.is_dir():
        return []
    name = re.compile(rf"(\d{{8}}T\d{{6}})-{re.escape(env)}-{re.escape(rack)}(?:\.(\d+))?")
    found = []
    for d in runs.iterdir():
        m = name.fullmatch(d.name)
        if m is None or d.is_symlink() or not d.is_dir():
            continue
        data = _summary(d)
        if data is not None and (data.get("env"), data.get("rack")) != (env, rack):
            continue  # another environment's rack whose names join to the same text
        found.append((m.group(1), int(m.group(2) or 1), d))
    return [d for *_, d in sorted(found)]


def prune(runs: Path, env: str, rack: str, keep: int, current: Path) -> list[Path]:
    """Remove this rack's oldest records so that `keep` remain, `current` always among them."""
    older = [d for d in rack_records(runs, env, rack) if d != current]
    gone = older[:max(0, len(older) - max(keep - 1, 0))]
    for d in gone:
        shutil.rmtree(d)
    return gone


def latest(runs: Path, env: str, rack: str) -> dict | None:
    """The newest summary of a (non-check) join run of this rack, or None (a departure's reset is not one)."""
    for d in reversed(rack_records(runs, env, rack)):
        data = _summary(d)
        if data is not None and not data.get("check") and data.get("playbook", "join.yml") == "join.yml":
            return data
    return None
