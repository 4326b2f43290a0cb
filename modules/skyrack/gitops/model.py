"""What `skyrack diff` reports: changes with a risk level, per environment.

A `Change` is one thing that will happen to a cluster, in the words of the domain,
with its risk (info < caution < danger), the area it touches and the field of the
environment file that causes it. Changes to many nodes are one `Change` per rack
with the node names attached, so a pull request adding 64 nodes stays one line.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..errors import Problem

Risk = Literal["info", "caution", "danger"]
RISKS: tuple[Risk, ...] = ("danger", "caution", "info")  # most severe first
Status = Literal["added", "deleted", "renamed", "modified", "unchanged", "invalid"]


@dataclass(frozen=True)
class Change:
    risk: Risk
    area: str  # environment | nodes | control-plane | network | vpn | kubernetes | mirrors | teams | cloud-pools | ...
    field: str  # where in the environment (or lock) file
    message: str
    nodes: tuple[str, ...] = ()  # the nodes concerned, when it is about nodes

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["nodes"] = list(self.nodes)
        return d


def counts(changes: list[Change]) -> dict[str, int]:
    out = dict.fromkeys(RISKS, 0)
    for c in changes:
        out[c.risk] += 1
    return out


@dataclass
class EnvDiff:
    name: str
    status: Status
    base_path: str | None
    head_path: str | None
    changes: list[Change] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # why it is invalid
    stack: bool = False  # it has Pulumi stacks (the control plane and the cluster layer): not a lab

    @property
    def path(self) -> str:
        return self.head_path or self.base_path or self.name

    def sorted_changes(self) -> list[Change]:
        return sorted(self.changes, key=lambda c: RISKS.index(c.risk))

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "base_path": self.base_path, "head_path": self.head_path,
                "stack": self.stack, "counts": counts(self.changes), "changes": [c.as_dict() for c in self.sorted_changes()],
                "problems": [p.as_dict() for p in self.problems]}


@dataclass
class Report:
    base: str
    head: str
    envs: list[EnvDiff]
    code_changes: list[str] = field(default_factory=list)  # files under modules/, ansible/, stacks/ that differ

    @property
    def changes(self) -> list[Change]:
        return [c for e in self.envs for c in e.changes]

    @property
    def counts(self) -> dict[str, int]:
        return counts(self.changes)

    @property
    def invalid(self) -> list[EnvDiff]:
        return [e for e in self.envs if e.status == "invalid"]

    @property
    def changed(self) -> list[EnvDiff]:
        return [e for e in self.envs if e.status != "unchanged"]

    @property
    def exit_code(self) -> int:
        """0: nothing dangerous; 1: a danger item or an invalid environment."""
        return 1 if self.counts["danger"] or self.invalid else 0

    def as_dict(self) -> dict[str, Any]:
        return {"base": self.base, "head": self.head, "ok": self.exit_code == 0, "code_changes": self.code_changes,
                "summary": {**self.counts, "environments": len(self.envs), "changed": len(self.changed),
                            "invalid": len(self.invalid)},
                "environments": [e.as_dict() for e in self.envs]}
