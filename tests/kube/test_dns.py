"""Cluster DNS as the plan places it: CoreDNS spread hard across racks and nodes, on-prem where there are
racks, a disruption budget; a cache on every node (node-local-dns) on the address kubelet gives every pod.

The objects here; what they do on a real cluster (the spread, every node's cache answering, a rack cut off
from the control plane): tests/lab/test_kubernetes.py and bench/dns_outage.py.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml

from skyrack import plan as planmod
from skyrack.kube import bootstrap
from skyrack.render import cloud_init

from .conftest import CONFIGS

ENVS = ["lab", "dev", "prod"]


def pod_spec(r, kind: str, name: str) -> dict:
    return r.one(kind, name, "kube-system").manifest["spec"]["template"]["spec"]


@pytest.mark.parametrize("env", ENVS)
def test_coredns_is_spread_hard_across_zones_and_nodes_and_stays_on_prem(rendered, env):
    r = rendered(env)
    spec = pod_spec(r, "Deployment", "coredns")
    spread = {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}
    assert set(spread) == {planmod.ZONE_LABEL, "kubernetes.io/hostname"}  # each rack is its own zone
    for c in spread.values():
        # a hard limit, counted over the nodes CoreDNS may run on (not the control plane's, not NotReady ones)
        assert (c["maxSkew"], c["whenUnsatisfiable"], c["nodeTaintsPolicy"]) == (1, "DoNotSchedule", "Honor")
        assert c["labelSelector"]["matchLabels"] == r.one("Service", "kube-dns", "kube-system").manifest["spec"][
            "selector"]
        assert c["matchLabelKeys"] == ["pod-template-hash"]  # a rollout's new pods spread among themselves
    # replicas wait for as many racks (nodes) as the plan has for them, rather than double up on the first ones
    replicas = r.one("Deployment", "coredns", "kube-system").manifest["spec"]["replicas"]
    assert spread[planmod.ZONE_LABEL].get("minDomains", 1) == min(replicas, len(r.plan.env.racks))
    assert spread["kubernetes.io/hostname"].get("minDomains", 1) == min(replicas, len(r.plan.nodes))
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": planmod.RACK_LABEL, "operator": "Exists"}]}]
    assert r.plan.env.racks  # every shipped environment has racks: on-prem lookups never cross the VPN


def test_without_racks_coredns_may_run_on_any_node():
    p = planmod.make(CONFIGS / "dev.yaml")
    p = dataclasses.replace(p, env=p.env.model_copy(update={"racks": []}))
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in bootstrap.coredns_affinity(p)["nodeAffinity"]


@pytest.mark.parametrize("env", ENVS)
def test_coredns_replicas_follow_the_plans_size_and_a_budget_keeps_all_but_one(rendered, env):
    r = rendered(env)
    replicas = r.one("Deployment", "coredns", "kube-system").manifest["spec"]["replicas"]
    assert replicas == max(2, math.ceil(r.plan.env.node_count / 512))
    assert replicas >= 2  # a lost rack or node never takes the cluster's DNS with it
    pdb = r.one("PodDisruptionBudget", "coredns", "kube-system").manifest["spec"]
    assert pdb["maxUnavailable"] == 1


def test_the_prod_fleet_gets_more_replicas_than_the_lab():
    lab, prod = (bootstrap.coredns_replicas(planmod.make(CONFIGS / f"{e}.yaml")) for e in ("lab", "prod"))
    assert lab == 2 and prod == math.ceil(planmod.make(CONFIGS / "prod.yaml").env.node_count / 512) > lab


@pytest.mark.parametrize("env", ENVS)
def test_every_node_runs_a_cache_on_the_address_kubelet_gives_pods(rendered, env):
    r = rendered(env)
    ip = r.plan.node_dns_ip
    spec = pod_spec(r, "DaemonSet", "node-local-dns")
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "Default"
    assert spec["tolerations"] == [{"operator": "Exists"}]  # every node, GPU, team and control-plane ones
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert container["image"] == r.plan.env.cluster.versions.coredns
    assert container["livenessProbe"]["httpGet"]["host"] == ip
    kubelet = yaml.safe_load(r.one("ConfigMap", "kubelet-config", "kube-system").manifest["data"]["kubelet"])
    assert kubelet["clusterDNS"] == [ip]


def _blocks(corefile: str) -> dict[str, list[str]]:
    """Server blocks of a Corefile: their zones -> their lines (plugin lines and nested ones)."""
    out, current = {}, None
    for line in corefile.splitlines():
        if line and not line.startswith(" ") and line.endswith("{"):
            current = line[:-1].strip()
            out[current] = []
        elif current is not None and line.strip() not in ("", "}"):
            out[current].append(line.strip())
    return out


def test_the_caches_corefile_sends_cluster_names_to_kube_dns_and_serves_stale_answers():
    p = planmod.make(CONFIGS / "dev.yaml")
    blocks = _blocks(bootstrap.node_dns_corefile(p))
    domain = p.env.kubernetes.cluster_domain
    assert list(blocks) == [f"{domain}:53 in-addr.arpa:53 ip6.arpa:53", ".:53"]
    cluster, other = blocks.values()
    # the cluster's names to kube-dns, over TCP; everything else to the node's resolvers
    assert f"forward . {p.dns_service_ip} {{" in cluster and "force_tcp" in cluster
    assert "forward . /etc/resolv.conf" in other
    for lines in blocks.values():
        assert f"bind {p.node_dns_ip}" in lines  # only its own address: nothing else on the node is touched
        assert any(line.startswith("serve_stale") for line in lines)  # a cut-off node keeps answering
        assert "loop" in lines
    assert f"health {p.node_dns_ip}:{bootstrap.NODE_DNS_HEALTH_PORT}" in cluster


def test_the_cache_follows_a_changed_address_and_cluster_domain():
    p = planmod.make(CONFIGS / "dev.yaml")
    k = p.env.kubernetes.model_copy(update={"node_dns_ip": "169.254.53.53", "cluster_domain": "research.lab"})
    p = dataclasses.replace(p, env=p.env.model_copy(update={"kubernetes": k}))
    assert p.node_dns_ip == "169.254.53.53"
    assert cloud_init.kubelet_configuration(p)["clusterDNS"] == ["169.254.53.53"]
    blocks = _blocks(bootstrap.node_dns_corefile(p))
    assert "research.lab:53 in-addr.arpa:53 ip6.arpa:53" in blocks
    assert all("bind 169.254.53.53" in lines for lines in blocks.values())


def _directives(corefile: str) -> set[str]:
    """The plugins a Corefile uses: the first word of every line directly inside a server block."""
    out, depth = set(), 0
    for line in corefile.splitlines():
        words = line.split()
        if depth == 1 and words and words[0] != "}":
            out.add(words[0])
        depth += line.count("{") - line.count("}")
    return out


def test_the_lab_builds_coredns_with_every_plugin_both_corefiles_use():
    """The lab's CoreDNS is built with a chosen plugin set (skyrack.build.kubernetes): a directive missing from
    it stops CoreDNS at start, on every node."""
    from skyrack.build import kubernetes as build

    p = planmod.make(CONFIGS / "lab.yaml")
    used = _directives(bootstrap.COREFILE.format(domain="cluster.local")) | _directives(bootstrap.node_dns_corefile(p))
    assert {"bind", "forward", "cache", "kubernetes"} <= used  # the parser sees them
    assert used <= set(build.COREDNS_PLUGINS), used - set(build.COREDNS_PLUGINS)
