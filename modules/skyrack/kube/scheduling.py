"""Gang scheduling: the scheduler-plugins coscheduling profile, the PodGroup CRD and its RBAC.

The scheduler runs on the API-server VMs (configured by cloud-init, not by this layer), so its
configuration is core: ``skyrack.scheduler.scheduler_config_yaml``, which cloud-init embeds; the
image it must run is ``env.cluster.versions.scheduler_plugins``. In the cluster this layer adds
what the coscheduling plugin reads: the PodGroup CRD and the RBAC for the scheduler's identity.

A job is gang-scheduled when its pods carry ``scheduling.x-k8s.io/pod-group: <name>`` and a
PodGroup of that name sets ``minMember``: no pod of the group binds until all can.
"""

from __future__ import annotations

from typing import Any

from . import objects as o

GROUP = "scheduling.x-k8s.io"
POD_GROUP_LABEL = f"{GROUP}/pod-group"
SCHEDULER_USER = "system:kube-scheduler"


def _int(description: str, minimum: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "integer", "format": "int32", "description": description}
    if minimum is not None:
        out["minimum"] = minimum
    return out


def pod_group_crd() -> o.Manifest:
    """CustomResourceDefinition podgroups.scheduling.x-k8s.io (v1alpha1), as scheduler-plugins defines it."""
    quantity = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    spec = {"type": "object", "properties": {
        "minMember": _int("Pods that must be schedulable together before any of them binds.", 1),
        "minResources": {"type": "object", "additionalProperties": quantity,
                         "description": "Resources the whole group needs before it is scheduled."},
        "scheduleTimeoutSeconds": _int("How long the group may wait for all members.", 1),
    }}
    status = {"type": "object", "properties": {
        "phase": {"type": "string"}, "occupiedBy": {"type": "string"},
        "running": _int("running pods"), "succeeded": _int("succeeded pods"), "failed": _int("failed pods"),
        "scheduleStartTime": {"type": "string", "format": "date-time"},
    }}
    version = {"name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                   "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                   "metadata": {"type": "object"}, "spec": spec, "status": status}}}}
    return o.obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"podgroups.{GROUP}",
                 spec={"group": GROUP, "scope": "Namespaced", "versions": [version],
                       "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups",
                                 "singular": "podgroup", "shortNames": ["pg", "pgs"]}})


def manifests() -> list[o.Manifest]:
    name = "skyrack:scheduler-plugins"
    return [
        pod_group_crd(),
        o.cluster_role(name, [o.rule([GROUP], ["podgroups", "podgroups/status"],
                                     ["get", "list", "watch", "update", "patch"])]),
        o.binding(name, "ClusterRole", name, [o.subject("User", SCHEDULER_USER)]),
    ]
