"""The Node objects of joined nodes carry the plan's labels and taints, also after the file changed.

kubelet applies `--node-labels` and `registerWithTaints` only when it registers a Node, so a node
moved to another rack or team in the environment file (`skyrack diff`: "labels and taints change")
would keep its old ones for life. Before the racks run, `skyrack join` patches every planned Node
that already exists to the plan's values of the keys skyrack owns:

* labels ``skyrack.io/env``, ``skyrack.io/rack``, ``skyrack.io/segment``, ``skyrack.io/team``, ``topology.kubernetes.io/zone``
  (set, or removed when the plan has none; GPU labels are left to the GPU stack, which reads them
  from the hardware), and ``node.kubernetes.io/exclude-disruption`` removed (a cloud Node's, plan.py);
* taints ``skyrack.io/team`` and ``nvidia.com/gpu`` (replaced by the plan's; every other taint,
  kubelet's and the control plane's own, is kept).

NoSchedule taints: pods already running stay (`skyrack diff`: "running jobs finish, new ones are the
new team's"). A Node already as planned is not written to.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from .. import plan as planmod

# the disruption exemption is a cloud Node's only: on a rack's Node it would hide that rack's failure from the
# node-lifecycle controller, so it is removed
LABELS = (planmod.ENV_LABEL, planmod.RACK_LABEL, planmod.SEGMENT_LABEL, planmod.TEAM_LABEL, planmod.ZONE_LABEL,
          planmod.DISRUPTION_EXEMPT_LABEL)
TAINTS = (planmod.TEAM_TAINT_KEY, planmod.GPU_TAINT_KEY)


def taint(spec: str) -> dict[str, str]:
    """'key=value:Effect' (the plan's form) as a Node's taint."""
    kv, _, effect = spec.rpartition(":")
    key, _, value = kv.partition("=")
    return {"key": key, "value": value, "effect": effect}


def patch_for(node: dict[str, Any], want: planmod.NodeVars) -> dict[str, Any] | None:
    """The merge patch that brings a Node's skyrack labels and taints to the plan's, or None."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    changes: dict[str, str | None] = {}
    for key in LABELS:
        value = want.labels.get(key)
        if labels.get(key) != value:
            changes[key] = value  # None removes it
    current = (node.get("spec") or {}).get("taints") or []
    kept = [t for t in current if t.get("key") not in TAINTS]
    planned = [taint(t) for t in want.taints]
    mine = [{k: t.get(k, "") for k in ("key", "value", "effect")} for t in current if t.get("key") in TAINTS]
    patch: dict[str, Any] = {}
    if changes:
        patch["metadata"] = {"labels": changes}
    if sorted(mine, key=str) != sorted(planned, key=str):
        patch["spec"] = {"taints": kept + planned}  # a list is replaced whole by a merge patch
    return patch or None


def patches(p: planmod.Plan, nodes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Node name -> its patch, for the planned Nodes that differ from the plan."""
    planned = {n.name: n for n in p.nodes}
    out = {}
    for node in nodes:
        name = (node.get("metadata") or {}).get("name", "")
        if name in planned and (patch := patch_for(node, planned[name])):
            out[name] = patch
    return out


def differing(p: planmod.Plan, nodes: list[dict[str, Any]]) -> list[str]:
    return list(patches(p, nodes))


def reconcile(call: Any, p: planmod.Plan, nodes: list[dict[str, Any]]) -> list[str]:
    """Patch every planned Node that differs; returns their names."""
    changed = []
    for name, patch in patches(p, nodes).items():
        call("PATCH", f"/api/v1/nodes/{urllib.parse.quote(name)}", patch, patch=True)
        changed.append(name)
    return changed
