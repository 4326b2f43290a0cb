"""Cordon and drain nodes as `kubectl drain` does, with gangs evicted whole.

* **Cordon** first: the nodes take no new pod while they are drained.
* **Evict** through the Eviction API, so PodDisruptionBudgets are respected: a refusal (HTTP 429)
  is retried until the deadline, and the pods a budget holds are named if the deadline passes.
* **Left alone**: DaemonSet pods (their controller would put them straight back, and they go
  with the node), mirror pods (a static pod's reflection), and pods that already finished.
* **Gangs whole.** A pod that belongs to a gang (``spec.schedulingGroup.podGroupName``, upstream's
  gang scheduling: skyrack.scheduler) is never evicted alone: a gang with one pod gone is a
  training job that hangs until its timeout. A gang with any pod on a drained node is first given
  ``gang_wait_s`` to finish by itself; then every pod of it, on any node, is evicted together,
  and only when a dry run says the budgets allow all of them (all or none).
* **Pods that tolerate the cordon** (a toleration of ``node.kubernetes.io/unschedulable``, or a
  blanket ``operator: Exists``) are evicted like the others, but their controller's replacement may
  be scheduled straight back onto the cordoned node; the drain names each such controller once
  and, at the deadline, says that this is why it could not finish.
* **Done** when no pod that counts is left on the nodes (evicted pods are gone, not just
  terminating), or DrainError at the deadline naming what is left and why.

The API comes in as one callable, ``call(method, path, body=None, *, patch=False)`` (readiness.client),
so the same code drains the lab's nodes and canned ones in tests.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .health import ApiError

Call = Callable[..., dict[str, Any]]
Pod = dict[str, Any]
Gang = tuple[str, str]  # (namespace, pod group)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CORDON_TAINT = "node.kubernetes.io/unschedulable"  # what the scheduler checks spec.unschedulable against


class DrainError(Exception):
    """The nodes could not be drained before the deadline (what is left is in the message)."""


@dataclass
class DrainOptions:
    timeout_s: float = 900  # the whole drain
    gang_wait_s: float = 0  # how long a gang on a drained node may run on before it is evicted
    interval_s: float = 5


@dataclass
class DrainReport:
    evicted: list[str] = field(default_factory=list)  # namespace/name
    gangs: list[str] = field(default_factory=list)  # namespace/podgroup, evicted whole
    seconds: float = 0.0


def name(pod: Pod) -> str:
    meta = pod.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def gang_of(pod: Pod) -> Gang | None:
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return (pod["metadata"].get("namespace", ""), group) if group else None


def counts(pod: Pod) -> bool:
    """Whether a drain must move this pod (see the module's "Left alone")."""
    meta = pod.get("metadata", {})
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return False
    if any(o.get("kind") == "DaemonSet" and o.get("controller") for o in meta.get("ownerReferences") or []):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def tolerates_cordon(pod: Pod) -> bool:
    """Whether the scheduler may place this pod on a cordoned node (its NodeUnschedulable plugin treats
    spec.unschedulable as the NoSchedule taint CORDON_TAINT)."""
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("effect") not in (None, "", "NoSchedule"):
            continue
        key, op = t.get("key") or "", t.get("operator") or "Equal"
        if (not key and op == "Exists") or (key == CORDON_TAINT and (op == "Exists" or not t.get("value"))):
            return True
    return False


def controller(pod: Pod) -> str:
    """namespace/Kind/name of the pod's controller, or the pod itself when it has none."""
    meta = pod.get("metadata", {})
    for o in meta.get("ownerReferences") or []:
        if o.get("controller"):
            return f"{meta.get('namespace', '')}/{o.get('kind')}/{o.get('name')}"
    return name(pod)


def cordon(call: Call, node: str, unschedulable: bool = True) -> None:
    call("PATCH", f"/api/v1/nodes/{urllib.parse.quote(node)}", {"spec": {"unschedulable": unschedulable}}, patch=True)


def pods_on(call: Call, node: str) -> list[Pod]:
    selector = urllib.parse.quote(f"spec.nodeName={node}")
    return [p for p in call("GET", f"/api/v1/pods?fieldSelector={selector}").get("items", []) if counts(p)]


def gang_pods(call: Call, gang: Gang) -> list[Pod]:
    """Every pod of a gang that still counts, on any node (pod groups have no field selector: filter here)."""
    ns, _ = gang
    items = call("GET", f"/api/v1/namespaces/{urllib.parse.quote(ns)}/pods").get("items", [])
    return [p for p in items if gang_of(p) == gang and counts(p)]


def evict(call: Call, pod: Pod, dry_run: bool = False) -> str | None:
    """None when the pod is evicted (or already gone); else why not (a budget's refusal)."""
    meta = pod["metadata"]
    ns, pod_name = urllib.parse.quote(meta["namespace"]), urllib.parse.quote(meta["name"])
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
    if dry_run:
        body["deleteOptions"] = {"dryRun": ["All"]}
    try:
        call("POST", f"/api/v1/namespaces/{ns}/pods/{pod_name}/eviction", body)
    except ApiError as exc:
        if exc.status == 404:
            return None
        if exc.status in (429, 500):  # a budget refuses (500: more than one budget covers the pod)
            return str(exc)
        raise
    return None


def drain(call: Call, nodes: list[str], opts: DrainOptions | None = None, *, log: Callable[[str], None] = print,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> DrainReport:
    """Cordon the nodes, then evict until none of them runs a pod that counts. Raises DrainError."""
    opts = opts or DrainOptions()
    start = clock()
    deadline, gang_deadline = start + opts.timeout_s, start + opts.gang_wait_s
    report = DrainReport()
    for node in nodes:
        cordon(call, node)
    log(f"cordoned {', '.join(nodes)}")
    refused: dict[str, str] = {}  # pod or gang -> why it is still there (logged when it changes)
    waiting_gangs: set[Gang] = set()
    returning: set[str] = set()  # controllers whose pods tolerate the cordon (named once)
    while True:
        left = [p for node in nodes for p in pods_on(call, node)]
        if not left:
            report.seconds = round(clock() - start, 1)
            return report
        why: dict[str, str] = {}
        # a gang is evicted for its pods still running here, not for its replacements elsewhere
        gangs = sorted({g for p in left if (g := gang_of(p)) and not p["metadata"].get("deletionTimestamp")})
        for pod in left:
            if tolerates_cordon(pod) and (owner := controller(pod)) not in returning:
                returning.add(owner)
                log(f"{owner}: its pods tolerate the cordon ({CORDON_TAINT}), so a replacement may be "
                    f"scheduled back onto {', '.join(nodes)} and be evicted again")
            if gang_of(pod) or pod["metadata"].get("deletionTimestamp"):
                continue
            refusal = evict(call, pod)
            if refusal:
                why[name(pod)] = refusal
            elif name(pod) not in report.evicted:
                report.evicted.append(name(pod))
        for gang in gangs:
            label = f"gang {gang[0]}/{gang[1]}"
            if clock() < gang_deadline:
                if gang not in waiting_gangs:
                    waiting_gangs.add(gang)
                    log(f"{label}: waiting up to {opts.gang_wait_s:.0f} s for it to finish before it is evicted whole")
                continue
            members = [p for p in gang_pods(call, gang) if not p["metadata"].get("deletionTimestamp")]
            refusals = [r for p in members if (r := evict(call, p, dry_run=True))]
            if refusals:
                why[label] = (f"a budget refuses {len(refusals)} of its {len(members)} pods, so none is evicted "
                              f"({refusals[0]})")
                continue
            for p in members:
                evict(call, p)
            if members:
                report.gangs.append(f"{gang[0]}/{gang[1]}")
                report.evicted.extend(name(p) for p in members if name(p) not in report.evicted)
                log(f"{label}: evicted whole ({len(members)} pods)")
        for what, reason in why.items():
            if refused.get(what) != reason:
                log(f"{what}: {reason}")
        refused = why
        if clock() + opts.interval_s > deadline:
            shown = ", ".join(f"{what} ({reason})" if reason else what
                              for what, reason in [*why.items(), *((name(p), "") for p in left if name(p) not in why)]
                              [:5])
            back = sorted({controller(p) for p in left if tolerates_cordon(p)})
            hint = (f"; {', '.join(back)} tolerate(s) the cordon ({CORDON_TAINT}) and keep coming back: drop "
                    f"that toleration, or scale the controller down for the drain" if back else "")
            raise DrainError(f"{', '.join(nodes)} not drained after {opts.timeout_s:.0f} s: {len(left)} pod(s) left: "
                             f"{shown}{hint}")
        sleep(opts.interval_s)
