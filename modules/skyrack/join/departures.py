"""Nodes that leave the cluster: removed from the environment file, or re-addressed.

`skyrack diff` promises that a removed node is "drained and removed from the cluster" and that a
re-addressed one is "drained and re-joined". `skyrack join` keeps that promise before it runs the
racks, rack by rack, for every departing node:

1. **found** from the cluster itself: a Node labelled with this environment and a rack
   (``skyrack.io/env``, ``skyrack.io/rack``; cloud pools' nodes have no rack and are the
   autoscaler's) that the plan does not hold is *removed*; one the plan holds at another
   address than its InternalIP is *re-addressed* (reached at its new address);
2. **drained** (kube/drain.py: cordon, evictions that respect PodDisruptionBudgets, gangs whole),
   within the file's ``join.drain_timeout_minutes``, gangs given ``join.gang_wait_minutes``;
3. **reset** by the ``leave.yml`` playbook (the ``node_reset`` role: kubeadm reset, kubelet
   stopped, the pod network's configuration, routes and masquerade rule gone), recorded like
   a join run;
4. **deleted**: the Node object, only after its host was reset (a kubelet still running would
   register it again), and waited for until it is gone;
5. **released**: a removed node's pod range, which the lock kept under ``leaving`` since
   `skyrack plan`, is dropped from the lock; the run says to commit it. A re-addressed node keeps
   its range and joins again in its rack's run that follows.

A node whose drain or reset fails keeps its Node, and a removed one its range; the failure
stops the join before any rack runs, and the next `skyrack join` starts that node over.
Leaving ranges whose Node is already gone (a node that never joined) are released at once.
`--check` says what would leave and changes nothing.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from .. import inventory
from .. import plan as planmod
from ..kube import drain as drainmod
from ..kube.health import ApiError
from ..term import safe

LEAVE_PLAYBOOK = "leave.yml"
GONE_TIMEOUT_S = 120  # a deleted Node object is gone within seconds; its finalizers get this long


class LeaveFailed(Exception):
    """A departing node could not be drained, reset or deleted: no rack runs after it."""


@dataclass(frozen=True)
class Departure:
    name: str
    rack: str  # the rack it is in (the file's) or was in (its Node's label)
    ip: str  # where its host is reached for the reset
    why: str  # "removed" | "re-addressed"
    detail: str = ""

    def describe(self) -> str:
        return f"{self.name} ({self.why}{': ' + self.detail if self.detail else ''})"


def internal_ip(node: dict[str, Any]) -> str | None:
    return next((a.get("address") for a in (node.get("status") or {}).get("addresses") or []
                 if a.get("type") == "InternalIP"), None)


def find(p: planmod.Plan, nodes: list[dict[str, Any]]) -> list[Departure]:
    """The departures the cluster's Nodes show against the plan, in rack then name order."""
    planned = {n.name: n for n in p.nodes}
    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        name = meta.get("name", "")
        if labels.get(planmod.ENV_LABEL) != p.env.name or planmod.RACK_LABEL not in labels:
            continue
        ip = internal_ip(node)
        if name not in planned:
            if ip:
                out.append(Departure(name, labels[planmod.RACK_LABEL], ip, "removed"))
        elif ip and ip != planned[name].ip:
            want = planned[name]
            out.append(Departure(name, want.rack, want.ip, "re-addressed", f"{ip} → {want.ip}"))
    return sorted(out, key=lambda d: (d.rack, d.name))


def select(found: list[Departure], rack: str | None, limit: list[str] | None) -> list[Departure]:
    """The departures a join of these racks and hosts covers (a whole join: every one)."""
    return [d for d in found if rack in (None, d.rack) and (not limit or d.name in limit)]


def env_nodes(call: drainmod.Call, env: str) -> list[dict[str, Any]]:
    selector = urllib.parse.quote(f"{planmod.ENV_LABEL}={env},{planmod.RACK_LABEL}")
    return call("GET", f"/api/v1/nodes?labelSelector={selector}").get("items", [])


def delete_node(call: drainmod.Call, name: str, *, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> None:
    path = f"/api/v1/nodes/{urllib.parse.quote(name)}"
    try:
        call("DELETE", path)
    except ApiError as exc:
        if exc.status != 404:
            raise
    deadline = clock() + GONE_TIMEOUT_S
    while True:
        try:
            call("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return
            raise
        if clock() > deadline:
            raise ApiError(0, f"Node {name} still exists {GONE_TIMEOUT_S} s after it was deleted (finalizers?)")
        sleep(2)


@dataclass
class Outcome:
    done: list[Departure]
    failed: dict[str, str]  # node -> why
    released: list[str]  # removed nodes whose pod ranges the lock no longer holds
    runs: list[Any]  # the reset runs' records (RackRun)
    relabelled: list[str] = field(default_factory=list)  # the join's: Nodes brought to the plan (node_objects.py)
    upgrade: Any = None  # the join's: upgrade.Findings, the nodes behind the plan's Kubernetes version


def leave(p: planmod.Plan, departures: list[Departure], call: drainmod.Call, console: Console,
          reset: Callable[[str, dict[str, str]], Any], drain_opts: drainmod.DrainOptions) -> Outcome:
    """Drain, reset, delete (and release) the departing nodes, one rack at a time.

    `reset(rack, {host: address})` runs the leave playbook on those hosts and returns its RackRun."""
    outcome = Outcome([], {}, [], [])
    racks: dict[str, list[Departure]] = {}
    for d in departures:
        racks.setdefault(d.rack, []).append(d)
    for rack, group in racks.items():
        names = [d.name for d in group]
        console.print(f"rack {safe(rack)}: leaving: {safe(', '.join(d.describe() for d in group))}")
        try:
            report = drainmod.drain(call, names, drain_opts, log=lambda m: console.print(f"  {safe(m)}"))
        except (drainmod.DrainError, ApiError) as exc:
            outcome.failed.update({n: f"drain: {exc}" for n in names})
            break
        console.print(f"  drained in {report.seconds} s: {len(report.evicted)} pod(s) evicted"
                      + (f", gangs whole: {', '.join(report.gangs)}" if report.gangs else ""))
        run = reset(rack, {d.name: d.ip for d in group})
        outcome.runs.append(run)
        bad = {h.host: h.message or h.result for h in run.hosts if h.bad}
        for d in group:
            if d.name in bad:
                outcome.failed[d.name] = f"reset: {bad[d.name]}"
                continue
            try:
                delete_node(call, d.name)
            except ApiError as exc:
                outcome.failed[d.name] = f"delete: {exc}"
                continue
            outcome.done.append(d)
        if outcome.failed:
            break
    removed = [d.name for d in outcome.done if d.why == "removed"]
    outcome.released = release(p, removed, console)
    return outcome


def release(p: planmod.Plan, names: list[str], console: Console) -> list[str]:
    """Drop these from the lock's `leaving` (their ranges free again); print what to commit."""
    gone = [n for n in names if n in p.allocation.leaving]
    ranges = {n: str(p.allocation.leaving[n]) for n in gone}
    if planmod.release(p, gone):
        console.print(f"pod ranges released ({safe(', '.join(f'{n} {r}' for n, r in ranges.items()))}): "
                      f"commit {safe(p.lock_path)}")
    return gone


def stale_leaving(p: planmod.Plan, nodes: list[dict[str, Any]]) -> list[str]:
    """Leaving entries of the lock whose Node the cluster no longer has (never joined, or deleted)."""
    present = {(n.get("metadata") or {}).get("name") for n in nodes}
    return [n for n in p.allocation.leaving if n not in present]


def reset_inventory(p: planmod.Plan, hosts: dict[str, str], public: dict[str, Any] | None) -> dict[str, Any]:
    return inventory.leaving(p, hosts, public)
