"""What cloud-pool nodes (Azure scale-set instances) need from the cluster beyond a rack's join.

* Their own bootstrap token. A scale set carries its token in its model for as long as it
  exists, and the autoscaler adds instances at any time, so this token does not expire
  (the racks' token keeps ``cluster.bootstrap_token_ttl_hours``). It is good for nothing but
  joining as a node (``usage-bootstrap-authentication`` in the kubeadm node group); rotate it
  with ``pulumi up --replace`` of the control plane's ``pool-bootstrap-token`` and then of this
  layer (new instances get the new model; the old Secret is deleted).
* cloud-provider-azure's ``cloud-node-manager`` on pool nodes. Their kubelets run with
  ``--cloud-provider=external`` and start tainted ``node.cloudprovider.kubernetes.io/uninitialized``;
  the node manager reads the instance from Azure's metadata service (no credentials), sets
  ``spec.providerID`` (``azure:///subscriptions/.../virtualMachineScaleSets/<ss>/virtualMachines/<n>``),
  zone and instance-type labels, and removes the taint. Without a provider ID
  cluster-autoscaler cannot map a node to its scale-set instance and deletes it as unregistered.
  On-prem nodes and API servers are not cloud instances and do not get it.
"""

from __future__ import annotations

from typing import Any

from .. import plan as planmod
from . import bootstrap
from . import objects as o

NAMESPACE = "kube-system"
APISERVER_PORT = 6443
NODE_MANAGER = "cloud-node-manager"
UNINITIALIZED_TAINT = "node.cloudprovider.kubernetes.io/uninitialized"
# cloud-provider-azure's release line follows Kubernetes' minor version; 1.37 is what dev and prod run.
# (Its first release of the line: MCR cannot be reached from here to check for a later patch.)
NODE_MANAGER_IMAGES = {37: "mcr.microsoft.com/oss/kubernetes/azure-cloud-node-manager:v1.37.0"}


def node_manager_image(p: planmod.Plan) -> str:
    minor = p.env.kubernetes.minor
    if minor not in NODE_MANAGER_IMAGES:
        raise ValueError(f"no cloud-node-manager release is pinned for Kubernetes 1.{minor} "
                         f"(skyrack.kube.cloudpools.NODE_MANAGER_IMAGES has {sorted(NODE_MANAGER_IMAGES)})")
    return NODE_MANAGER_IMAGES[minor]


def pool_token_secret(token_id: Any, token_secret_part: Any) -> o.Manifest:
    """The cloud pools' bootstrap-token Secret: the racks' Secret without an expiration."""
    m = bootstrap.token_secret(token_id, token_secret_part, expiration="")
    data = m["stringData"]
    del data["expiration"]
    data["description"] = "skyrack: joins cloud-pool nodes (scale-set instances); no expiry, rotate by replacing it"
    m["_pulumi_name"] = "pool-bootstrap-token"
    return m


def node_manager(p: planmod.Plan) -> list[o.Manifest]:
    labels = {"app.kubernetes.io/name": NODE_MANAGER}
    c = o.container(NODE_MANAGER, node_manager_image(p),
                    command=["cloud-node-manager", "--node-name=$(NODE_NAME)", "--wait-routes=false"],
                    env=[{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                         # straight to the API servers' load balancer: on a node it has not initialised yet,
                         # neither kube-proxy's service rules nor the CNI may be in place
                         {"name": "KUBERNETES_SERVICE_HOST", "value": p.apiserver_lb_ip},
                         {"name": "KUBERNETES_SERVICE_PORT", "value": str(APISERVER_PORT)}],
                    requests={"cpu": "50m", "memory": "50Mi"}, limits={"memory": "512Mi"})
    pod = {"serviceAccountName": NODE_MANAGER, "priorityClassName": "system-node-critical", "hostNetwork": True,
           "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
               {"matchExpressions": [{"key": planmod.POOL_LABEL, "operator": "Exists"}]}]}}},
           # it must run on the node it is about to untaint
           "tolerations": [{"operator": "Exists"}], "containers": [c]}
    return [
        o.service_account(NODE_MANAGER, NAMESPACE),
        o.cluster_role(f"skyrack:{NODE_MANAGER}", [
            o.rule([""], ["events"], ["create", "patch", "update"]),
            o.rule([""], ["nodes"], ["get", "list", "watch", "update", "patch"]),
            o.rule([""], ["nodes/status"], ["patch"])]),
        o.binding(f"skyrack:{NODE_MANAGER}", "ClusterRole", f"skyrack:{NODE_MANAGER}",
                  [o.subject("ServiceAccount", NODE_MANAGER, NAMESPACE)]),
        o.workload("DaemonSet", NODE_MANAGER, NAMESPACE, pod, labels=labels),
    ]


def manifests(p: planmod.Plan, *, token_id: Any = None, token_secret_part: Any = None) -> list[o.Manifest]:
    """Nothing without cloud pools; the token Secret only when the control plane exports a pool token."""
    if not p.pools:
        return []
    out = node_manager(p)
    if token_id is not None:
        out.append(pool_token_secret(token_id, token_secret_part))
    return out
