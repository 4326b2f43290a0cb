"""cluster-autoscaler for the cloud pools (Azure VM scale sets), with a bounded scale-down.

Only the cloud pools are node groups (``--nodes=min:max:<scale set>``); on-prem racks are never
touched. One scale-down removes at most ``max_scale_down_nodes`` nodes: the share
``cluster.autoscaler.max_scale_down_share`` of the cloud pools' combined maximum, at least one.
That bound is applied to both kinds of removal (empty nodes deleted in bulk, and nodes drained
in parallel) through the flags the pinned autoscaler (1.37) still accepts, and the next
scale-down waits ``scale_down_unneeded_minutes`` after a deletion, so a burst of idleness cannot empty the pools in a few scan intervals.

Azure credentials come from the Secret ``cluster-autoscaler-azure`` (ARM_* keys); the stack
creates it when the control-plane stack exports ``autoscaler_credentials``. The Azure stack's are a
user-assigned managed identity (``skyrack.azure.autoscaler``) attached to the API-server VMs only, with
no secret: its tokens come from the VM's metadata service. So the autoscaler runs on the API servers,
on the host network (the metadata service answers the VM's own address; an API-server VM has no pod
addresses of its own). Nowhere else would do: on-prem nodes have no metadata service, pool nodes carry
no identity (jobs run there) and may all be gone, and the API servers are always up.
"""

from __future__ import annotations

import math
from typing import Any

from .. import plan as planmod
from . import batch
from . import labels as lb
from . import objects as o

NAMESPACE = "kube-system"
NAME = "cluster-autoscaler"
CREDENTIALS_SECRET = "cluster-autoscaler-azure"  # noqa: S105 - a Secret's name


def scale_set_name(p: planmod.Plan, pool: planmod.PoolPlan) -> str:
    """The Azure scale set of a cloud pool (the control-plane stack's naming, skyrack-<env>-<pool>),
    when that stack does not export `cloud_pool_scale_sets`."""
    return f"skyrack-{p.env.name}-{pool.name}"


def max_scale_down_nodes(p: planmod.Plan) -> int:
    share = p.env.cluster.autoscaler.max_scale_down_share
    return max(1, math.floor(share * sum(pool.max for pool in p.pools)))


def args(p: planmod.Plan, scale_sets: Any = None) -> list[Any]:
    """The autoscaler's flags. ``scale_sets`` (pool -> scale set name) may be a pulumi.Output."""
    a = p.env.cluster.autoscaler
    bound = max_scale_down_nodes(p)

    def group(pool: planmod.PoolPlan) -> Any:
        return o.lift(lambda names: f"--nodes={pool.min}:{pool.max}:"
                                    f"{(names or {}).get(pool.name) or scale_set_name(p, pool)}", scale_sets)

    nodes = [group(pool) for pool in p.pools]
    return [
        "--cloud-provider=azure", *nodes,
        "--expander=least-waste", "--balance-similar-node-groups=true",
        # One bound for both kinds of removal: empty nodes are deleted under --max-scale-down-parallelism
        # (--max-empty-bulk-delete is deprecated in 1.31 for exactly that), drained ones under both flags.
        f"--max-scale-down-parallelism={bound}", f"--max-drain-parallelism={bound}",
        f"--scale-down-unneeded-time={a.scale_down_unneeded_minutes}m",
        f"--scale-down-delay-after-add={a.scale_down_delay_after_add_minutes}m",
        f"--scale-down-delay-after-delete={a.scale_down_unneeded_minutes}m",
        f"--max-graceful-termination-sec={a.max_graceful_termination_seconds}",
        "--skip-nodes-with-system-pods=true", "--v=2",
        # preemptible jobs scale no pool and hold no node (batch.AUTOSCALER_EXPENDABLE_CUTOFF)
        f"--expendable-pods-priority-cutoff={batch.AUTOSCALER_EXPENDABLE_CUTOFF}",
    ]


def credentials_secret(credentials: Any) -> o.Manifest:
    """ARM_* values (Pulumi secrets) for the autoscaler's Azure client."""
    return o.obj("v1", "Secret", CREDENTIALS_SECRET, NAMESPACE, type="Opaque",
                 stringData=o.lift(lambda c: {"ARM_VM_TYPE": "vmss", **(c or {})}, credentials))


def manifests(p: planmod.Plan, scale_sets: Any = None) -> list[o.Manifest]:
    if not p.pools:
        return []
    labels = {"app.kubernetes.io/name": NAME}
    image = p.env.cluster.versions.cluster_autoscaler
    c = o.container(NAME, image, command=["./cluster-autoscaler", *args(p, scale_sets)],
                    envFrom=[{"secretRef": {"name": CREDENTIALS_SECRET, "optional": False}}],
                    requests={"cpu": "100m", "memory": "600Mi"}, limits={"memory": "2Gi"},
                    securityContext={"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                     "capabilities": {"drop": ["ALL"]}})
    pod = {"serviceAccountName": NAME, "priorityClassName": "system-cluster-critical",
           "securityContext": {"runAsNonRoot": True, "runAsUser": 65534},
           # where its Azure identity is (module docstring): the API servers, through their metadata service
           "hostNetwork": True, "dnsPolicy": "Default", "nodeSelector": {lb.CONTROL_PLANE_LABEL: ""},
           "tolerations": [lb.CONTROL_PLANE_TAINT.toleration()], "containers": [c]}
    read = ["get", "list", "watch"]
    return [
        o.service_account(NAME, NAMESPACE),
        o.cluster_role(f"skyrack:{NAME}", [
            o.rule([""], ["events", "endpoints"], ["create", "patch"]),
            o.rule([""], ["pods/eviction"], ["create"]),
            o.rule([""], ["pods/status"], ["update"]),
            o.rule([""], ["endpoints"], ["get", "update"], [NAME]),
            o.rule([""], ["nodes"], [*read, "update"]),
            o.rule([""], ["namespaces", "pods", "services", "replicationcontrollers", "persistentvolumeclaims",
                          "persistentvolumes"], read),
            o.rule(["extensions", "apps"], ["daemonsets", "replicasets", "statefulsets"], read),
            o.rule(["policy"], ["poddisruptionbudgets"], read),
            o.rule(["batch"], ["jobs", "cronjobs"], read),
            o.rule(["storage.k8s.io"], ["storageclasses", "csinodes", "csidrivers", "csistoragecapacities",
                                        "volumeattachments"], read),
            o.rule(["coordination.k8s.io"], ["leases"], ["create"]),
            o.rule(["coordination.k8s.io"], ["leases"], ["get", "update"], [NAME])]),
        o.binding(f"skyrack:{NAME}", "ClusterRole", f"skyrack:{NAME}", [o.subject("ServiceAccount", NAME, NAMESPACE)]),
        # its status ConfigMap, in its own namespace only
        o.role(NAME, NAMESPACE, [o.rule([""], ["configmaps"], [*read, "create", "update", "patch", "delete"])]),
        o.binding(NAME, "Role", NAME, [o.subject("ServiceAccount", NAME, NAMESPACE)], NAMESPACE),
        o.workload("Deployment", NAME, NAMESPACE, pod, labels=labels, replicas=1),
    ]
