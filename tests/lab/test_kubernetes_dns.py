"""Cluster DNS on the lab's real cluster (after test_kubernetes.py): CoreDNS spread across both racks and
never two replicas on one node, a cache on every node that pods use, and DNS through a rack cut off from
the control plane.

The cut here lasts two minutes: long enough for the node to go NotReady and CoreDNS's endpoint on it to
leave kube-dns (the moment the old layout, both replicas on one node, lost the cluster's DNS); the
issue's ten minutes, past the evictions at ~5.5 min, are bench/dns_outage.py, run by hand.
"""

from __future__ import annotations

import json
import shlex
import time

import pytest

from skyrack import plan as planmod
from skyrack.kube import bootstrap, health

from . import outage
from .test_kubernetes import NAMESPACE, kubectl, probe_namespace

pytestmark = [pytest.mark.lab, pytest.mark.slow]
CUT_S = 120
PROBE = "dns-probe"


@pytest.fixture(scope="module")
def cluster(lab):
    lab.ready()
    p = planmod.make(lab.env)
    probe_namespace(lab)
    # a Service whose name every lookup below asks for (a ClusterIP needs no endpoints to have a record)
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": PROBE, "namespace": NAMESPACE},
           "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}}
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps(svc))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dns-client", "namespace": NAMESPACE},
           "spec": {"nodeName": p.nodes[0].name, "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "agnhost", "image": lab.image("agnhost"), "args": ["pause"]}]}}
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps(pod))
    kubectl(lab, "-n", NAMESPACE, "wait", "--for=condition=Ready", "pod/dns-client", "--timeout=240s")
    yield p
    kubectl(lab, "-n", NAMESPACE, "delete", "pod/dns-client", f"service/{PROBE}", "--wait=false", check=False)


def _coredns_pods(lab) -> list[dict]:
    return json.loads(kubectl(lab, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "json"))["items"]


def test_coredns_replicas_span_the_racks_never_two_on_a_node(lab, cluster):
    p = cluster
    placed = [pod["spec"].get("nodeName") for pod in _coredns_pods(lab) if pod["status"].get("phase") == "Running"]
    assert len(placed) == bootstrap.coredns_replicas(p), placed
    ready_workers = [n["name"] for n in lab.nodes() if n["ready"] and n["name"] in {x.name for x in p.nodes}]
    assert len(ready_workers) >= len(placed)  # so no node may hold two
    assert len(set(placed)) == len(placed), f"two CoreDNS replicas on one node: {placed}"
    rack_of = {n.name: n.rack for n in p.nodes}
    assert {rack_of[n] for n in placed} == {r.name for r in p.env.racks}, placed


def test_every_node_answers_from_its_own_cache_and_pods_use_it(lab, cluster):
    p = cluster
    pods = json.loads(kubectl(lab, "-n", "kube-system", "get", "pods", "-l", f"k8s-app={bootstrap.NODE_DNS}",
                              "-o", "json"))["items"]
    on = {pod["spec"]["nodeName"] for pod in pods if pod["status"].get("phase") == "Running"}
    assert {n.name for n in p.nodes} | {m.name for m in p.members_of("apiserver")} <= on, on
    for node in p.nodes:
        # the address is the node's own (the kubelet role's unit), and the cache on it answers
        assert f"inet {p.node_dns_ip}/32" in lab.ssh(node.name, "ip -4 -o address show dev lo"), node.name
        assert lab.ssh(node.name, "systemctl is-enabled skyrack-node-dns.service").strip() == "enabled"
    # a pod's resolver is its node's cache (kubelet's clusterDNS), and a Service name resolves through it
    servers = kubectl(lab, "-n", NAMESPACE, "exec", "dns-client", "--", "/agnhost", "dns-server-list").split()
    assert servers == [p.node_dns_ip], servers
    kubectl(lab, "-n", NAMESPACE, "exec", "dns-client", "--", "/agnhost", "connect",
            f"kubernetes.default.svc.{p.env.kubernetes.cluster_domain}:443", "--timeout=5s")


def test_dns_survives_a_rack_cut_off_from_the_control_plane(lab, cluster):
    """The last rack's node loses the API servers for CUT_S: lookups on the other racks' nodes (the caches
    their pods ask) of kubernetes.default and a Service name all answer throughout; the cut node's cache
    keeps answering the names it resolved before; the node did go NotReady (the cut was real)."""
    p = cluster
    domain = p.env.kubernetes.cluster_domain
    names = {f"kubernetes.default.svc.{domain}": p.api_service_ip,
             f"{PROBE}.{NAMESPACE}.svc.{domain}": json.loads(kubectl(lab, "-n", NAMESPACE, "get", "service", PROBE,
                                                                     "-o", "json"))["spec"]["clusterIP"]}
    cut_rack = p.env.racks[-1].name
    cut_nodes = [n.name for n in p.nodes if n.rack == cut_rack]
    others = [n.name for n in p.nodes if n.rack != cut_rack]
    assert cut_nodes and others
    for node in cut_nodes + others:  # answered before the cut: in each node's cache
        for name, ip in names.items():
            argv = ["python3", "-c", health.DNS_QUERY, name, p.node_dns_ip]
            # Warming the caches, not the test: a first lookup once answered "no record" in a full run (not
            # reproduced since), so each is asked until it answers. The cut below tolerates no failure.
            got = [lab.ssh(node, shlex.join(argv), check=False).strip()]
            deadline = time.monotonic() + 60
            while got[-1] != ip and time.monotonic() < deadline:
                time.sleep(3)
                got.append(lab.ssh(node, shlex.join(argv), check=False).strip())
            assert got[-1] == ip, (node, name, got)

    def ready(node: str) -> bool | None:
        return next((n["ready"] for n in lab.nodes(all_ready=False) if n["name"] == node), None)

    loops = {n: outage.lookup_loop(lab.paths.ssh_config, n, p.node_dns_ip, list(names), CUT_S + 30)
             for n in cut_nodes + others}
    with outage.cut(lab.ssh, cut_nodes[0], outage.control_plane_addresses(p)):
        outage.wait_node_condition(lambda: ready(cut_nodes[0]), False, CUT_S)
        # while it is NotReady: a pod on another rack resolves a Service name (the pod's own lookup)
        kubectl(lab, "-n", NAMESPACE, "exec", "dns-client", "--", "/agnhost", "connect",
                f"kubernetes.default.svc.{domain}:443", "--timeout=5s")
        rows = {n: outage.lookups(proc, CUT_S + 120) for n, proc in loops.items()}
    for node, got in rows.items():
        assert len(got) >= CUT_S // 4, (node, got[-3:])  # the loop ran the whole time
        assert outage.failures(got, names) == [], node
    outage.wait_node_condition(lambda: ready(cut_nodes[0]), True, 300)
    lab.ready()

