"""Run records: one directory per rack run under `runs/`, with ansible-runner's artifacts and a summary.

`runs/<UTC time>-<env>-<rack>/summary.json` says, per host, the counts, the result and
the first error, and per host what was skipped and why. `--retry-failed` reads the
newest record of each rack to know which hosts to run again.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

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
    started: float
    seconds: float = 0.0
    rc: int = 0
    status: str = ""  # ansible-runner's: successful | failed | timeout | canceled
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
    while d.exists():
        i += 1
        d = base.with_name(f"{base.name}.{i}")
    d.mkdir(parents=True)
    return d


def save(run: RackRun) -> None:
    (Path(run.record) / "summary.json").write_text(json.dumps(run.to_dict(), indent=2) + "\n")


def latest(runs: Path, env: str, rack: str) -> dict | None:
    """The newest summary of a (non-check) run of this rack, or None."""
    if not runs.is_dir():
        return None
    for d in sorted(runs.glob(f"*-{env}-{rack}*"), key=lambda p: p.name, reverse=True):
        summary = d / "summary.json"
        if summary.exists():
            data = json.loads(summary.read_text())
            if data.get("env") == env and data.get("rack") == rack and not data.get("check"):
                return data
    return None
