"""Racks behind the plan's Kubernetes version, upgraded by `skyrack join` node batch by node batch.

A changed `kubernetes.version` reaches the racks through the join, as every other change to a node
does. Before any rack runs, `skyrack join` (with the control plane's outputs) reads the cluster:

* **Guards** (`guard`), refused before anything runs: racks are never upgraded ahead of the control
  plane (the API server's own `/version` is older than the plan's version); a node is never moved
  more than one minor at a time (kubeadm upgrades one minor; the plan's minor is more than one above
  a node's kubelet). Kubelets outside upstream's version-skew policy (newer than the API server, or
  more than three minors older) are reported.
* **Behind** (`behind`): a Node of the plan whose kubelet reports an older version than the plan's,
  or one an earlier upgrade left cordoned (the annotation `UPGRADING`: the upgrade resumes there).

Each rack then runs its nodes that are not behind as a join always does (new nodes join at the new
version), and its nodes that are behind in batches (`batches`: `join.upgrade_serial`, Ansible's
`serial` semantics, default one node then a fifth of the rack at a time). Per batch (`Roll`):

1. **drain** (kube/drain.py: cordoned, PodDisruptionBudgets respected, a gang evicted whole and
   after `join.gang_wait_minutes`), each Node annotated `UPGRADING` with the target version;
2. **the join playbook** on the batch with ``skyrack_upgrading``: the kubelet role unholds kubelet
   and kubeadm, installs the plan's version and holds them again (a joined node behind the plan
   refuses without that variable: no upgrade of a node that was not drained), the kubeadm_join role
   runs `kubeadm upgrade node`, kubelet restarts;
3. wait until each Node is Ready and its kubelet reports the plan's version (`READY_TIMEOUT_S`), then
   **uncordon** it; the annotation is removed with the cordon.

A node whose play or wait fails stays cordoned and annotated; more than `MAX_FAIL_PERCENT` of a
batch failing stops the rack (the hosts after it are not run), as the playbook's
`max_fail_percentage` does. `skyrack join --retry-failed` starts those nodes over from the drain.
"""

from __future__ import annotations

import math
import re
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import plan as planmod
from ..kube import drain as drainmod
from ..kube.health import ApiError

UPGRADING = "skyrack.io/upgrading"  # on a Node an upgrade cordoned: the version it is being moved to
MAX_FAIL_PERCENT = 34  # the join playbook's max_fail_percentage
READY_TIMEOUT_S = 300  # an upgraded node's kubelet is Ready at the new version within this
SKEW_MINORS = 3  # upstream's version-skew policy: kubelet up to three minors older than the API server

Version = tuple[int, int, int]


class UpgradeRefused(Exception):
    """The cluster is not in a state the racks may be upgraded from (the message says what to run first)."""


def version(text: str) -> Version | None:
    """`v1.37.2`, `1.37.2`, `v1.37.2-skyrack.1` → (1, 37, 2); None when it is not one."""
    m = re.match(r"v?(\d+)\.(\d+)\.(\d+)", text or "")
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def show(v: Version) -> str:
    return ".".join(map(str, v))


def kubelet_version(node: dict[str, Any]) -> Version | None:
    return version(((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""))


def node_name(node: dict[str, Any]) -> str:
    return (node.get("metadata") or {}).get("name", "")


def control_plane(call: drainmod.Call) -> Version:
    """The API server's own version (`GET /version`)."""
    answer = call("GET", "/version").get("gitVersion", "")
    v = version(answer)
    if v is None:
        raise ApiError(0, f"GET /version: no version in the answer ({answer!r})")
    return v


@dataclass
class Findings:
    target: Version
    control_plane: Version
    behind: dict[str, str] = field(default_factory=dict)  # node -> its kubelet's version (or "resuming")
    skew: list[str] = field(default_factory=list)  # kubelets outside upstream's skew policy (reported)


def guard(p: planmod.Plan, api_version: Version, nodes: list[dict[str, Any]], env_ref: str) -> Findings:
    """What the cluster's versions say about this join of the plan; UpgradeRefused before anything runs."""
    target = version(p.env.kubernetes.version)
    assert target is not None  # the schema's pattern
    found = Findings(target, api_version)
    planned = {n.name for n in p.nodes}
    if target > api_version:
        raise UpgradeRefused(
            f"the plan gives the racks Kubernetes {show(target)} and the control plane runs {show(api_version)}: "
            f"racks are never upgraded ahead of the control plane. Upgrade the API servers first "
            f"(`skyrack upgrade {env_ref} --plan` lists the steps), then run this join again")
    skipped, ahead = [], []
    for node in nodes:
        name, kv = node_name(node), kubelet_version(node)
        if kv is None:
            continue
        if kv[1] > api_version[1]:
            found.skew.append(f"{name}: kubelet {show(kv)} is newer than the API server ({show(api_version)})")
        elif api_version[1] - kv[1] > SKEW_MINORS:
            found.skew.append(f"{name}: kubelet {show(kv)} is more than {SKEW_MINORS} minors older than the API "
                              f"server ({show(api_version)})")
        if name not in planned:
            continue
        annotated = UPGRADING in ((node.get("metadata") or {}).get("annotations") or {})
        if kv > target:
            ahead.append(f"{name} runs {show(kv)}")
        elif kv < target:
            if target[1] - kv[1] > 1:
                skipped.append(f"{name} runs {show(kv)}")
            found.behind[name] = show(kv)
        elif annotated:
            found.behind[name] = f"{show(kv)}, its upgrade not finished"
    if ahead:
        raise UpgradeRefused(
            f"the plan's Kubernetes {show(target)} is older than what these nodes run ({'; '.join(ahead)}): a "
            f"downgrade, which kubeadm does not support. Set kubernetes.version back to what the cluster runs")
    if skipped:
        raise UpgradeRefused(
            f"the plan's Kubernetes {show(target)} is more than one minor above what these nodes run "
            f"({'; '.join(skipped)}): kubeadm upgrades one minor at a time. Set kubernetes.version to the next "
            f"minor, join, then the one after")
    return found


def batches(hosts: Sequence[str], serial: Sequence[int | str]) -> list[list[str]]:
    """Ansible's `serial` list: each value a batch size (an int, or "N%" of all the hosts, at least one);
    the last value repeats until every host is in a batch."""
    out, i, step = [], 0, 0
    while i < len(hosts):
        spec = serial[min(step, len(serial) - 1)]
        size = max(1, math.floor(len(hosts) * int(spec[:-1]) / 100)) if isinstance(spec, str) else int(spec)
        out.append(list(hosts[i:i + size]))
        i, step = i + size, step + 1
    return out


def annotate(call: drainmod.Call, node: str, target: str | None) -> None:
    call("PATCH", f"/api/v1/nodes/{urllib.parse.quote(node)}",
         {"metadata": {"annotations": {UPGRADING: target}}}, patch=True)


def release(call: drainmod.Call, node: str) -> None:
    """Uncordon a node and remove the upgrade's annotation, in one patch."""
    call("PATCH", f"/api/v1/nodes/{urllib.parse.quote(node)}",
         {"metadata": {"annotations": {UPGRADING: None}}, "spec": {"unschedulable": None}}, patch=True)


def ready_at(node: dict[str, Any], target: Version) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return ready and kubelet_version(node) == target


def wait_ready(call: drainmod.Call, names: list[str], target: Version, *, timeout_s: float = READY_TIMEOUT_S,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> dict[str, str]:
    """Wait until each Node is Ready with its kubelet at `target`; the ones that are not by the deadline, and why."""
    deadline = clock() + timeout_s
    waiting = {n: "not read yet" for n in names}
    while True:
        for name in list(waiting):
            try:
                node = call("GET", f"/api/v1/nodes/{urllib.parse.quote(name)}")
            except ApiError as exc:
                waiting[name] = str(exc)
                continue
            if ready_at(node, target):
                del waiting[name]
            else:
                kv = kubelet_version(node)
                waiting[name] = f"kubelet {show(kv) if kv else '?'}, not Ready at {show(target)}"
        if not waiting or clock() > deadline:
            return {n: f"{why} {int(timeout_s)} s after the upgrade" for n, why in waiting.items()}
        sleep(5)


@dataclass
class Roll:
    """One rack's upgrade: its batches drained, played and released in turn (see the module's text)."""

    call: drainmod.Call
    target: Version
    serial: Sequence[int | str]
    drain_opts: drainmod.DrainOptions
    log: Callable[[str], None]
    ready_timeout_s: float = READY_TIMEOUT_S

    def run(self, hosts: list[str], play: Callable[[list[str]], dict[str, str]]) -> tuple[dict[str, str], list[str]]:
        """`play(batch)` runs the playbook on a batch and returns its failed hosts and why. Returns every
        failed host and why, and the hosts not run (a batch over MAX_FAIL_PERCENT stopped the rack)."""
        failed: dict[str, str] = {}
        groups = batches(hosts, self.serial)
        for i, batch in enumerate(groups, 1):
            self.log(f"upgrade batch {i}/{len(groups)} to {show(self.target)}: {', '.join(batch)}")
            try:
                for name in batch:
                    annotate(self.call, name, show(self.target))
                report = drainmod.drain(self.call, batch, self.drain_opts, log=lambda m: self.log(f"  {m}"))
            except (drainmod.DrainError, ApiError) as exc:
                for name in batch:  # not upgraded: back into service, to be tried again
                    try:
                        release(self.call, name)
                    except ApiError:
                        pass
                failed.update({n: f"drain: {exc}" for n in batch})
                return failed, [h for g in groups[i:] for h in g]
            self.log(f"  drained in {report.seconds} s: {len(report.evicted)} pod(s) evicted"
                     + (f", gangs whole: {', '.join(report.gangs)}" if report.gangs else ""))
            bad = play(batch)
            good = [n for n in batch if n not in bad]
            try:  # Ready first, then back in service: a node that never gets there stays cordoned and marked
                bad.update(wait_ready(self.call, good, self.target, timeout_s=self.ready_timeout_s))
                for name in good:
                    if name not in bad:
                        release(self.call, name)
            except ApiError as exc:
                bad.update({n: f"uncordon: {exc}" for n in good if n not in bad})
            for name, why in bad.items():
                self.log(f"  {name}: {why} (left cordoned: `skyrack join --retry-failed` starts it over)")
            failed.update(bad)
            if len(bad) * 100 > MAX_FAIL_PERCENT * len(batch):
                return failed, [h for g in groups[i:] for h in g]
        return failed, []
