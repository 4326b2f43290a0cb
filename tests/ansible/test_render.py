"""The files the join renders, from Python: the same templates and variables the roles use."""

from __future__ import annotations

import pytest
import yaml

from skyrack import plan as planmod
from skyrack.join import node_files, outputs
from support import CONFIGS

OUTPUTS = {
    "apiserver_endpoint": "https://198.18.0.36:6443",
    "ca_cert_pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    "ca_cert_hash": "sha256:" + "0f" * 32,
    "bootstrap_token": "abcdef.0123456789abcdef",
}


@pytest.fixture(scope="module")
def lab_plan() -> planmod.Plan:
    return planmod.make(CONFIGS / "lab.yaml")


@pytest.fixture(scope="module")
def prod_plan() -> planmod.Plan:
    return planmod.make(CONFIGS / "prod.yaml")


def test_join_configuration_carries_the_control_plane_outputs(lab_plan):
    doc = yaml.safe_load(node_files.join_configuration(lab_plan, "r01-n02", OUTPUTS))
    assert doc["apiVersion"] == "kubeadm.k8s.io/v1beta4" and doc["kind"] == "JoinConfiguration"
    token = doc["discovery"]["bootstrapToken"]
    assert token == {"apiServerEndpoint": "198.18.0.36:6443", "token": "abcdef.0123456789abcdef",
                     "caCertHashes": ["sha256:" + "0f" * 32]}
    reg = doc["nodeRegistration"]
    assert reg["name"] == "r01-n02"
    assert reg["kubeletExtraArgs"] == [{"name": "node-ip", "value": "198.18.0.132"}]
    assert reg["taints"] == [{"key": "skyrack.io/team", "value": "robotics", "effect": "NoSchedule"}]


def test_gpu_nodes_get_team_and_gpu_taints_and_labels(prod_plan):
    gpu = next(n for n in prod_plan.nodes if n.gpu_count)
    kubelet = yaml.safe_load(node_files.kubelet_config(prod_plan, gpu.name))
    effects = {(t["key"], t["effect"]) for t in kubelet["registerWithTaints"]}
    assert ("nvidia.com/gpu", "NoSchedule") in effects
    # the pod range reaches the node's CNI configuration (role pod_network): kubelet ignores podCIDR in a cluster
    assert "podCIDR" not in kubelet and kubelet["maxPods"] == gpu.max_pods
    assert kubelet["serializeImagePulls"] is False and kubelet["maxParallelImagePulls"] == 10
    assert kubelet["clusterDNS"] == [prod_plan.node_dns_ip]  # the node's own cache, not kube-dns
    flags = node_files.kubelet_flags(prod_plan, gpu.name)
    assert f"nvidia.com/gpu.product={gpu.gpu_model}" in flags and f"--node-ip={gpu.ip}" in flags
    # a rack's node counts in its zone's health, so that its failure is seen (only cloud Nodes are exempt)
    assert planmod.DISRUPTION_EXEMPT_LABEL not in flags


def test_a_node_without_taints_registers_with_none(lab_plan):
    bare = planmod.NodeVars(**{**lab_plan.nodes[0].__dict__, "taints": [], "team": None})
    p = planmod.Plan(**{**lab_plan.__dict__, "nodes": [bare]})
    assert yaml.safe_load(node_files.kubelet_config(p, bare.name))["registerWithTaints"] == []


@pytest.mark.parametrize(("key", "value", "message"), [
    ("bootstrap_token", "ABC.def", "expected <6 chars>.<16 chars> of [a-z0-9] (value hidden)"),
    ("bootstrap_token", "[secret]", "is hidden: write the file with `pulumi stack output --json --show-secrets`"),
    ("ca_cert_hash", "md5:00", "expected sha256:<64 hex digits> (got 'md5:00')"),
    ("apiserver_endpoint", None, "required but missing"),
])
def test_outputs_contract(tmp_path, key, value, message):
    data = {**OUTPUTS, key: value}
    if value is None:
        del data[key]
    with pytest.raises(outputs.InputError) as exc:
        outputs.check(data, tmp_path / "o.json")
    assert [str(p) for p in exc.value.problems] == [f"{tmp_path / 'o.json'}: {key}: {message}"]


def test_secrets_are_kept_apart_from_the_inventory():
    public, secret = outputs.split_secrets(OUTPUTS)
    assert secret == {"skyrack_cp_bootstrap_token": OUTPUTS["bootstrap_token"]}
    assert OUTPUTS["bootstrap_token"] not in str(public)
    assert public["ca_cert_hash"] == OUTPUTS["ca_cert_hash"]
