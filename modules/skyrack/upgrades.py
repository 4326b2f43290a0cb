"""`skyrack upgrade <env> --plan`: the ordered steps that bring a cluster to the file's `kubernetes.version`.

The order is the one `skyrack diff` promises a reviewer: the control plane first, one API server at a time;
then the cluster layer; then the racks, in the join's order (the canary rack alone, then `join.parallel` at
once), each rack's nodes that are behind drained, upgraded and uncordoned in batches of
`join.upgrade_serial` (skyrack.join.upgrade). With the control plane's outputs the steps are the cluster's:
the API server's version, only the API servers whose own Node (each registers one) runs an older kubelet,
and only the rack Nodes behind; without them, every member and every planned node. So an upgrade stopped
at any step is resumed by planning again: what is done is said to be done, and the next step is first.
Nothing is changed: the plan reads the cluster at most.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from . import plan as planmod
from .join import upgrade


@dataclass
class RackStep:
    rack: str
    when: str  # "canary: alone, first" | "after the canary, up to N racks at once"
    batches: list[list[str]]
    current: list[str] = field(default_factory=list)  # nodes already at the version (joined as always)


@dataclass
class Steps:
    env: str
    target: str
    control_plane: str | None  # the API server's version, when the cluster was read
    apiservers: list[str]  # to replace, in order (every member when the cluster was not read)
    racks: list[RackStep]
    read_cluster: bool
    refused: str = ""  # what the join would refuse (the guards), with what to run first
    lab: bool = False  # a lab environment: its API servers are replaced by `skyrack lab replace`
    skew: list[str] = field(default_factory=list)
    apiservers_done: list[str] = field(default_factory=list)  # members whose Node runs the target already

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def steps(p: planmod.Plan, nodes: list[dict[str, Any]] | None = None,
          api_version: upgrade.Version | None = None) -> Steps:
    """The upgrade's steps for this plan; `nodes` and `api_version` are the cluster's when it was read."""
    target = p.env.kubernetes.version
    found = None
    refused = ""
    if nodes is not None and api_version is not None:
        try:
            found = upgrade.guard(p, api_version, nodes, str(p.source))
        except upgrade.UpgradeRefused as exc:
            refused = str(exc)
    racks: dict[str, list[str]] = {}
    for n in p.nodes:
        racks.setdefault(n.rack, []).append(n.name)
    known = {upgrade.node_name(n): upgrade.kubelet_version(n) for n in nodes or []}
    members = [m.name for m in p.members_of("apiserver")]
    done = [m for m in members if (known.get(m) or (0,)) >= upgrade.version(target)] if nodes is not None else []
    out = []
    for i, (rack, names) in enumerate(racks.items()):
        if found is not None:
            behind = [n for n in names if n in found.behind]
            current = [n for n in names if n not in found.behind and n in known]
        else:
            behind, current = names, []
        when = "canary: alone, first" if i == 0 and p.env.join.canary else \
            f"{'after the canary, ' if p.env.join.canary else ''}up to {p.env.join.parallel} rack(s) at once"
        out.append(RackStep(rack, when, upgrade.batches(behind, p.env.join.upgrade_serial), current))
    return Steps(p.env.name, target, upgrade.show(api_version) if api_version else None,
                 [m for m in members if m not in done], out, nodes is not None, refused,
                 lab=p.env.lab is not None, skew=found.skew if found else [], apiservers_done=done)


def short(batch: list[str]) -> str:
    """A batch by name, a long one by its first and last node (--json lists every one)."""
    return ", ".join(batch) if len(batch) <= 3 else f"{batch[0]} … {batch[-1]} ({len(batch)} nodes)"


def lines(s: Steps, env_ref: str) -> list[str]:
    """The steps as the command prints them (plain text; the caller escapes for the terminal)."""
    cp = f"runs {s.control_plane}" if s.control_plane else "not read (give --outputs to read the cluster)"
    out = [f"Upgrade of {s.env} to Kubernetes {s.target} (the control plane {cp}); nothing is changed by this plan."]
    done = f" ({', '.join(s.apiservers_done)}: at {s.target} already)" if s.apiservers_done else ""
    if s.apiservers:
        out.append("1. Control plane, one API server at a time: " + " → ".join(s.apiservers)
                   + ": each replaced with the user-data of the new version; the next only when it answers /readyz "
                     "and etcd is healthy ("
                   + (f"`skyrack lab replace <member> {env_ref}` each" if s.lab else
                      "docs/azure.md, \"Changing a running member, replacing one\"") + ")" + done + ".")
    else:
        out.append(f"1. Control plane: done, every API server's Node runs {s.target}{done}.")
    out.append("2. Cluster layer: `pulumi up` of stacks/cluster (kubeadm-config, kubelet-config, kube-proxy, "
               "CoreDNS, the scheduler).")
    out.append(f"3. Racks: `skyrack join {env_ref} --outputs <control-plane outputs>`; per batch: cordon, drain "
               "(PodDisruptionBudgets respected, gangs whole), packages unheld, upgraded and held, "
               "`kubeadm upgrade node`, kubelet restarted, uncordon, Ready at the new version.")
    for r in s.racks:
        if not r.batches:
            out.append(f"   rack {r.rack} ({r.when}): nothing behind")
            continue
        out.append(f"   rack {r.rack} ({r.when}): " + "; ".join(
            f"batch {i}: {short(b)}" for i, b in enumerate(r.batches, 1)))
    for line in s.skew:
        out.append(f"version skew: {line}")
    if s.refused:
        out.append(f"The join would refuse now: {s.refused}")
    return out
