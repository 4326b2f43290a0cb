"""A simulated fleet on the lab's real control plane: 200 of prod's planned nodes as KWOK nodes, and gangs on them.

`skyrack lab fleet up --shape configs/prod.yaml --nodes 200` registers prod's first 200 nodes (racks r001-r003
whole, 8 of r004) with the lab's API server and etcd; KWOK holds their leases and reports their status. Each
Node must be what the join would register (labels, taints, sizes, GPUs from the plan), Ready, with a lease
that is renewed. Then the scheduler places a 64-pod gang of whole-node GPU pods on robotics' 64 nodes, and a
gang one pod larger than language's rack places no pod at all. `fleet down` removes every node and KWOK.
The same machinery, at up to 7,680 nodes with figures, is bench/fleet_scale.py.

Runs after test_join.py and before test_kubernetes_layer.py (alphabetical order); leaves no simulated node.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from skyrack import plan as planmod
from skyrack import scheduler
from skyrack.kube import isolation
from skyrack.lab import fleet
from support import CONFIGS, run_cli

from .test_join_removal import kubectl, wait

pytestmark = [pytest.mark.lab, pytest.mark.slow]
NODES, GANG = 200, 64
NS = "skyrack-e2e-fleet"


def gang(name: str, size: int, team: str, gpus: int, image: str) -> list[dict]:
    group = {"apiVersion": scheduler.POD_GROUP_API, "kind": "PodGroup", "metadata": {"name": name, "namespace": NS},
             "spec": {"schedulingPolicy": {"gang": {"minCount": size}}}}
    tolerations = [{"key": planmod.TEAM_TAINT_KEY, "operator": "Equal", "value": team, "effect": "NoSchedule"},
                   {"key": planmod.GPU_TAINT_KEY, "operator": "Equal", "value": planmod.GPU_TAINT_VALUE,
                    "effect": "NoSchedule"}]
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{name}-{i:03d}", "namespace": NS, "labels": {"gang": name}},
             "spec": {"terminationGracePeriodSeconds": 0, "tolerations": tolerations,
                      "nodeSelector": {fleet.SIMULATED_LABEL: "true", planmod.TEAM_LABEL: team},
                      "schedulingGroup": {"podGroupName": name},
                      "containers": [{"name": "train", "image": image,
                                      "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)},
                                                    "limits": {"nvidia.com/gpu": str(gpus)}}}]}}
            for i in range(size)]
    return [group, *pods]


def placed(lab, name: str) -> dict[str, str]:
    """Pod -> node of gang `name`'s bound pods."""
    items = json.loads(kubectl(lab, "get", "pods", "-n", NS, "-l", f"gang={name}", "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")}


def test_a_simulated_fleet_registers_as_the_join_would_and_takes_whole_gangs(lab):
    lab.ready()
    shape = planmod.make(CONFIGS / "prod.yaml")
    try:
        proc = run_cli("lab", "fleet", "up", str(lab.env), "--shape", str(CONFIGS / "prod.yaml"),
                       "--nodes", str(NODES), "--json", timeout=1500)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        res = json.loads(proc.stdout)
        assert res["ok"] and res["nodes"] == NODES and res["simulated"] == NODES, res

        items = json.loads(kubectl(lab, "get", "nodes", "-l", fleet.SIMULATED_LABEL, "-o", "json").stdout)["items"]
        want = {n.name: n for n in shape.nodes[:NODES]}
        assert sorted(i["metadata"]["name"] for i in items) == sorted(want)
        for item in items:
            n = want[item["metadata"]["name"]]
            labels, status = item["metadata"]["labels"], item["status"]
            assert n.labels.items() <= labels.items() and labels["kubernetes.io/hostname"] == n.name
            # the plan's taints, and no other: the lifecycle controller's not-ready taint is gone once `up` returns
            assert sorted(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in item["spec"]["taints"]) == \
                sorted(n.taints)
            r = n.reservation
            assert status["capacity"]["nvidia.com/gpu"] == str(n.gpu_count) == "8"
            assert status["capacity"]["cpu"] == str(r.cpus) and status["allocatable"]["cpu"] == f"{r.allocatable_cpu_m}m"
            assert status["allocatable"]["memory"] == f"{r.allocatable_memory_mi}Mi"
            assert status["allocatable"]["pods"] == str(n.max_pods)
            assert {"type": "InternalIP", "address": n.ip} in status["addresses"]
            assert next(c["status"] for c in status["conditions"] if c["type"] == "Ready") == "True"

        # each holds a lease that KWOK renews at kubelet's rhythm (every 10 s of a 40 s lease); its holder is
        # KWOK's own ID where kubelet writes the node's name (the node lifecycle controller reads the renew time)
        holders = set()

        def renewed(node: str) -> str:
            lease = json.loads(kubectl(lab, "get", "lease", "-n", "kube-node-lease", node, "-o", "json").stdout)
            assert lease["spec"]["leaseDurationSeconds"] == fleet.LEASE_SECONDS
            holders.add(lease["spec"]["holderIdentity"])
            return lease["spec"]["renewTime"]

        first = renewed(shape.nodes[0].name)
        wait("the lease is renewed", lambda: renewed(shape.nodes[0].name) != first, timeout=30, interval=2)
        age = dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(renewed(shape.nodes[NODES - 1].name))
        assert age < dt.timedelta(seconds=fleet.LEASE_SECONDS), age
        assert len(holders) == 1 and "" not in holders, holders  # one KWOK holds them all

        ns = {"apiVersion": "v1", "kind": "Namespace",
              "metadata": {"name": NS, "labels": isolation.cluster_service_labels()}}
        docs = [ns, *gang("robotics", GANG, "robotics", 8, lab.image("pause")),
                *gang("language", GANG + 1, "language", 8, lab.image("pause"))]
        kubectl(lab, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        on = wait("the robotics gang is placed whole", lambda: (p := placed(lab, "robotics")) and len(p) == GANG and p,
                  timeout=300)
        assert set(on.values()) == {n.name for n in shape.nodes[:NODES] if n.team == "robotics"}  # one pod per node
        wait("its pods run (KWOK)", lambda: kubectl(lab, "get", "pods", "-n", NS, "-l", "gang=robotics",
                                                     "--field-selector=status.phase=Running", "-o", "name")
             .stdout.count("pod/") == GANG, timeout=120)
        # language has 64 nodes: a gang of 65 whole-node pods is tried, and never starts one of them
        wait("the language gang is tried", lambda: "FailedScheduling" in kubectl(
            lab, "get", "events", "-n", NS, "--field-selector", "involvedObject.name=language-000", "-o", "json").stdout,
             timeout=120)
        assert placed(lab, "language") == {}
    finally:
        kubectl(lab, "delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=False)
        down = run_cli("lab", "fleet", "down", str(lab.env), "--json", timeout=900)
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)["deleted"] == NODES and json.loads(down.stdout)["kwok_stopped"]
    assert kubectl(lab, "get", "nodes", "-l", fleet.SIMULATED_LABEL, "-o", "name").stdout.strip() == ""
