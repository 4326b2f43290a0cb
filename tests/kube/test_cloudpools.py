"""Cloud-pool nodes: their own non-expiring join token, and cloud-node-manager for their providerID."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from skyrack import plan as planmod
from skyrack.kube import bootstrap, cloudpools
from skyrack.render import cloud_init
from support import is_secret

from .conftest import CONFIGS, POOL_TOKEN, TOKEN
from .placement import can_run_on, pod_spec

UNINITIALIZED = f"{cloudpools.UNINITIALIZED_TAINT}=true:NoSchedule"


def test_pools_get_a_token_that_does_not_expire_and_racks_keep_theirs(rendered):
    r = rendered("dev")
    pool_id, pool_secret = bootstrap.split_token(POOL_TOKEN)
    pool = r.one("Secret", f"bootstrap-token-{pool_id}", "kube-system")
    data = pool.manifest["stringData"]
    assert "expiration" not in data  # the scale set's model carries it as long as the pool exists
    wire = pool.inputs["stringData"]
    assert data["token-secret"] == pool_secret and (is_secret(wire) or is_secret(wire["token-secret"]))
    assert data["usage-bootstrap-authentication"] == "true" and data["auth-extra-groups"] == bootstrap.TOKEN_GROUP
    racks = r.one("Secret", f"bootstrap-token-{bootstrap.split_token(TOKEN)[0]}", "kube-system")
    assert racks.manifest["stringData"]["expiration"].endswith("Z")  # cluster.bootstrap_token_ttl_hours


def test_cloud_node_manager_runs_on_pool_nodes_only_and_untaints_them(rendered):
    r = rendered("dev")
    ds = r.one("DaemonSet", cloudpools.NODE_MANAGER, "kube-system").manifest
    pod = pod_spec(ds)
    pool = r.plan.pools[0]
    # The kubelet flags a pool node registers with: from the user-data its scale set carries.
    user_data = yaml.safe_load(cloud_init.pool_node(r.plan, pool, cloud_init.WorkerJoin(POOL_TOKEN, "sha256:00"),
                                                    kubernetes_repo="https://k8s-apt.example.test/deb/"))
    kubeadm = next(f["content"] for f in user_data["write_files"] if f["path"] == "/etc/skyrack/kubeadm.yaml")
    join = yaml.safe_load(kubeadm)
    args = {a["name"]: a["value"] for a in join["nodeRegistration"]["kubeletExtraArgs"]}
    pool_labels = dict(kv.split("=") for kv in args["node-labels"].split(","))
    assert args["cloud-provider"] == "external"
    assert can_run_on(pod, pool_labels, [UNINITIALIZED])
    for node in r.plan.nodes:  # on-prem nodes are no Azure instances
        assert not can_run_on(pod, node.labels, [])
    assert pod["containers"][0]["image"] == cloudpools.NODE_MANAGER_IMAGES[r.plan.env.kubernetes.minor]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    # hostNetwork, and the API server by its load balancer: no kube-proxy or CNI needed before it runs
    assert pod["hostNetwork"] is True
    assert f"https://{env['KUBERNETES_SERVICE_HOST']}:{env['KUBERNETES_SERVICE_PORT']}" == r.plan.apiserver_endpoint
    role = r.one("ClusterRole", f"skyrack:{cloudpools.NODE_MANAGER}", None).manifest
    nodes = next(rule for rule in role["rules"] if rule["resources"] == ["nodes"])
    assert {"patch", "update"} <= set(nodes["verbs"])  # providerID, labels, the taint


def test_no_pools_no_pool_objects(rendered):
    r = rendered("lab")
    assert not any(x.manifest["metadata"]["name"] == cloudpools.NODE_MANAGER for x in r.objects())


def test_an_unpinned_kubernetes_minor_is_an_error_not_a_guess():
    p = planmod.make(CONFIGS / "dev.yaml")
    env = p.env.model_copy(update={"kubernetes": p.env.kubernetes.model_copy(update={"version": "1.29.0"})})
    with pytest.raises(ValueError, match=r"no cloud-node-manager release is pinned for Kubernetes 1\.29"):
        cloudpools.node_manager_image(dataclasses.replace(p, env=env))
