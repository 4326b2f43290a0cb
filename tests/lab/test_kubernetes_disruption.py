"""Outages the node-lifecycle controller must tell apart, on the lab's real cluster (after test_kubernetes.py).

* A WAN outage: every rack cut off from the control plane at once (the VPN is one link for the whole site).
  No pod is evicted and no Node deleted; the nodes are NotReady while it lasts (nothing is hidden) and
  Ready after, their pods the same pods.
* A single node lost: tainted unreachable and its pods evicted and started elsewhere, as upstream documents.

How (docs/azure.md "A WAN outage"): every Node in Azure carries node.kubernetes.io/exclude-disruption
(plan.DISRUPTION_EXEMPT_LABEL), so the zones the controller weighs are the racks alone; every rack down
is "all zones fully disrupted", in which upstream stops all evictions. Without the label the control
plane's Ready Node keeps one zone healthy, and each cut rack, a fully disrupted zone, is evicted at the
normal rate: the six-minute cut that lost every pod. Upstream leaves behind a taint its tainter adds in the
pass that enters that state (kubernetes#111385; this test's first run hit it on two of three nodes), which
skyrack-wan-guard on every API server removes.

The pods tolerate the unreachable taint for TOLERATION_S rather than the default 300 s, so that both
outcomes show within minutes: without the exemption the cut below evicts them at about t+100 s.
From the control plane a node powered off and a node whose every packet to it is dropped look alike (its
Lease stops being renewed); the lab drops the packets, inside the node (tests/lab/outage.py).
bench/dns_outage.py --wan holds the same cut for as long as asked (the issue's 30 minutes).
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack

import pytest

from skyrack import plan as planmod

from . import outage
from .test_kubernetes import NAMESPACE, kubectl, probe_namespace
from .test_kubernetes_layer import wait as wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]
TOLERATION_S = 45
# Past the ~50 s grace period plus TOLERATION_S (the moment an unprotected pod would go, ~95 s), with a margin
# of more than half of that again.
CUT_S = 150
UNREACHABLE = "node.kubernetes.io/unreachable"


def tolerations() -> list[dict]:
    """The team taint (to run on a rack), and NotReady/unreachable for TOLERATION_S only."""
    short = [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": TOLERATION_S}
             for key in (UNREACHABLE, "node.kubernetes.io/not-ready")]
    return [{"key": planmod.TEAM_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}, *short]


def get(lab, *args: str) -> dict:
    return json.loads(kubectl(lab, *args, "-o", "json"))


def ready(node: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))


def unreachable_tainted(node: dict) -> bool:
    return any(t["key"] == UNREACHABLE and t["effect"] == "NoExecute" for t in node["spec"].get("taints") or [])


@pytest.fixture(scope="module")
def p(lab) -> planmod.Plan:
    lab.ready()
    probe_namespace(lab)
    return planmod.make(lab.env)


def test_the_control_planes_nodes_are_left_out_of_the_zones_health_and_the_racks_are_not(lab, p):
    nodes = {n["metadata"]["name"]: n for n in get(lab, "get", "nodes")["items"]}
    exempt = {name for name, n in nodes.items() if planmod.DISRUPTION_EXEMPT_LABEL in n["metadata"]["labels"]}
    assert exempt == {m.name for m in p.members_of("apiserver")}, exempt
    for member in p.members_of("apiserver"):
        assert lab.ssh(member.name, "systemctl is-active skyrack-wan-guard.service").strip() == "active"


def test_a_wan_outage_evicts_no_pod_and_deletes_no_node(lab, p):
    racks = [n.name for n in p.nodes]
    for node in racks:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"wan-{node}", "namespace": NAMESPACE},
               "spec": {"nodeName": node, "tolerations": tolerations(), "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "pause", "image": lab.image("agnhost"), "args": ["pause"]}]}}
        kubectl(lab, "apply", "-f", "-", stdin=json.dumps(pod))
    names = [f"wan-{n}" for n in racks]
    for name in names:
        kubectl(lab, "-n", NAMESPACE, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=240s")
    before = {i["metadata"]["name"]: i["metadata"]["uid"] for i in get(lab, "-n", NAMESPACE, "get", "pods")["items"]
              if i["metadata"]["name"] in names}
    node_uids = {n["metadata"]["name"]: n["metadata"]["uid"] for n in get(lab, "get", "nodes")["items"]}
    try:
        start = time.monotonic()
        with ExitStack() as cuts:
            for node in racks:
                cuts.enter_context(outage.cut(lab.ssh, node, outage.control_plane_addresses(p)))
            # the cut is real: every rack's node goes NotReady ...
            wait_for("every rack node NotReady", lambda: all(
                not ready(n) for n in get(lab, "get", "nodes")["items"] if n["metadata"]["name"] in racks), 150)
            seen = []
            while time.monotonic() - start < CUT_S:
                pods = {i["metadata"]["name"]: i for i in get(lab, "-n", NAMESPACE, "get", "pods")["items"]}
                # ... and not one of its pods is marked for deletion, at any moment of the cut
                marked = [name for name in before if pods.get(name, {}).get("metadata", {}).get("deletionTimestamp")]
                assert not marked and set(before) <= set(pods), (round(time.monotonic() - start), marked)
                seen.append(round(time.monotonic() - start))
                time.sleep(10)
            # all zones down: the controller holds the taint off every rack node (it may have been on one
            # for the seconds between the first rack going NotReady and the last)
            nodes = [n for n in get(lab, "get", "nodes")["items"] if n["metadata"]["name"] in racks]
            assert not [n["metadata"]["name"] for n in nodes if unreachable_tainted(n)]
            assert not [n["metadata"]["name"] for n in nodes if ready(n)]  # still cut: nothing was hidden
        wait_for("every rack node Ready again", lambda: all(
            ready(n) for n in get(lab, "get", "nodes")["items"] if n["metadata"]["name"] in racks), 300)
        after = get(lab, "-n", NAMESPACE, "get", "pods")["items"]
        assert {i["metadata"]["name"]: i["metadata"]["uid"] for i in after if i["metadata"]["name"] in before} \
            == before  # the same pods, never replaced
        assert {n["metadata"]["name"]: n["metadata"]["uid"] for n in get(lab, "get", "nodes")["items"]} \
            == node_uids  # no Node deleted (or deleted and registered again)
        for name in before:
            kubectl(lab, "-n", NAMESPACE, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s")
        assert len(seen) >= CUT_S // 20, seen
    finally:
        kubectl(lab, "-n", NAMESPACE, "delete", "pod", *names, "--wait=false", check=False)
    lab.ready()


def test_a_single_lost_node_is_tainted_and_its_pods_started_elsewhere(lab, p):
    """One node gone while its rack's other node and the other rack answer: the controller taints it and
    evicts its pods after their toleration, and the Deployment's replacement runs on the rack's other node."""
    rack = next(r.name for r in p.env.racks if sum(n.rack == r.name for n in p.nodes) >= 2)
    hosts = [n.name for n in p.nodes if n.rack == rack]
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "lost-node", "namespace": NAMESPACE},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "lost-node"}},
                       "template": {"metadata": {"labels": {"app": "lost-node"}}, "spec": {
                           "tolerations": tolerations(), "terminationGracePeriodSeconds": 0,
                           "nodeSelector": {planmod.RACK_LABEL: rack},
                           "containers": [{"name": "pause", "image": lab.image("agnhost"), "args": ["pause"]}]}}}}
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps(deploy))
    try:
        kubectl(lab, "-n", NAMESPACE, "rollout", "status", "deployment/lost-node", "--timeout=240s")
        first, = get(lab, "-n", NAMESPACE, "get", "pods", "-l", "app=lost-node")["items"]
        lost = first["spec"]["nodeName"]
        assert lost in hosts
        with outage.cut(lab.ssh, lost, outage.control_plane_addresses(p)):
            wait_for(f"{lost} tainted {UNREACHABLE}:NoExecute",
                     lambda: unreachable_tainted(get(lab, "get", "node", lost)), 150)

            def replaced() -> dict | None:
                pods = get(lab, "-n", NAMESPACE, "get", "pods", "-l", "app=lost-node")["items"]
                old = next((i for i in pods if i["metadata"]["uid"] == first["metadata"]["uid"]), None)
                new = [i for i in pods if i["metadata"]["uid"] != first["metadata"]["uid"]
                       and i["status"].get("phase") == "Running"]
                return new[0] if new and (old is None or old["metadata"].get("deletionTimestamp")) else None

            new = wait_for("the lost node's pod evicted and its replacement Running", replaced, TOLERATION_S + 150)
            assert new["spec"]["nodeName"] in set(hosts) - {lost}
            assert all(ready(get(lab, "get", "node", h)) for h in hosts if h != lost)  # only the one was lost
        wait_for(f"{lost} Ready and untainted again", lambda: (lambda n: ready(n) and not unreachable_tainted(n))(
            get(lab, "get", "node", lost)), 300)
    finally:
        kubectl(lab, "-n", NAMESPACE, "delete", "deployment/lost-node", "--wait=false", check=False)
    lab.ready()
