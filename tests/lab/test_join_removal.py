"""A node leaves the lab the way a user removes one, and comes back; a rack changes teams.

The user's steps: take the node out of the environment file, `skyrack plan` (the lock keeps its pod
range under `leaving`), `skyrack join --outputs ...`. The join drains the node (a gang with a pod on it
is evicted whole, its pod on another node too), resets the host, deletes the Node and only then
releases the range; the remaining nodes drop their route to it. A second join changes nothing, and
the reset run again on the host changes nothing. Putting the node back in the file joins it again.

Runs right after test_join.py (alphabetical order): every worker is joined and the cluster layer is up;
the test brings its own namespace (an operator's, outside the team policies) and leaves every node joined.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from skyrack import plan as planmod
from skyrack import scheduler
from skyrack.join import departures, driver
from skyrack.kube import isolation
from support import run_cli

pytestmark = [pytest.mark.lab, pytest.mark.slow]
LEAVER, STAYER = "r01-n02", "r01-n01"
NS = "skyrack-e2e-leave"
RACKS = {"r01": [STAYER], "r02": ["r02-n01"]}


def kubectl(lab, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = run_cli("lab", "kubectl", "--env", str(lab.env), *args, timeout=300, input=stdin)
    assert proc.returncode == 0 or not check, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc


def wait(what: str, predicate, timeout: float = 240, interval: float = 3):
    deadline = time.monotonic() + timeout
    while not (got := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(interval)
    return got


def join(env: Path, runs: Path, outputs: Path) -> dict:
    proc = run_cli("join", str(env), "--runs-dir", str(runs), "--outputs", str(outputs), "--json", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)


def changed(data: dict) -> dict[str, int]:
    return {h["host"]: h["changed"] for r in data["racks"] for h in r["hosts"]}


def gang_pod(lab, name: str, node: str, taints: list[str]) -> dict:
    tolerations = [{"key": t.split("=")[0], "operator": "Equal", "value": t.split("=")[1].split(":")[0],
                    "effect": t.split(":")[1]} for t in taints]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"skyrack-e2e": "leave"}},
            "spec": {"terminationGracePeriodSeconds": 0, "nodeSelector": {"kubernetes.io/hostname": node},
                     "tolerations": tolerations, "schedulingGroup": {"podGroupName": "training"},
                     "containers": [{"name": "pause", "image": lab.image("pause"),
                                     "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}}}]}}


@pytest.fixture(scope="module")
def outputs(lab) -> Path:
    proc = run_cli("lab", "outputs", str(lab.env))
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


@pytest.fixture(scope="module")
def smaller(lab, tmp_path_factory) -> Path:
    """The lab's environment file (and its lock) without LEAVER: rack r01's node_range one node shorter; and
    rack r02 moved from team robotics to vision (its Node's labels and taints follow)."""
    d = tmp_path_factory.mktemp("smaller")
    env = d / lab.env.name
    shutil.copy(lab.env, env)
    shutil.copy(planmod.lock_path(lab.env), planmod.lock_path(env))
    data = yaml.safe_load(env.read_text())
    r01 = next(r for r in data["racks"] if r["name"] == "r01")
    assert r01["node_range"]["count"] == 2, "the lab's r01 has two nodes, the second is LEAVER"
    r01["node_range"]["count"] = 1
    r02 = next(r for r in data["racks"] if r["name"] == "r02")
    assert r02["team"] == "robotics"
    r02["team"] = "vision"
    env.write_text(yaml.safe_dump(data, sort_keys=False))
    return env


def team_of(lab, node: str) -> tuple[str | None, list[str]]:
    """The Node's team label and its team taints' values."""
    doc = json.loads(kubectl(lab, "get", "node", node, "-o", "json").stdout)
    return (doc["metadata"]["labels"].get(planmod.TEAM_LABEL),
            [t.get("value") for t in doc["spec"].get("taints", []) if t["key"] == planmod.TEAM_TAINT_KEY])


def test_a_removed_node_is_drained_reset_deleted_and_its_range_released(lab, smaller, outputs, tmp_path):
    lab.ready()
    p_full = planmod.make(lab.env)
    leaver = next(n for n in p_full.nodes if n.name == LEAVER)
    taints = leaver.taints
    # an operator's namespace, outside the team policies (its pods tolerate robotics' taint)
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": isolation.cluster_service_labels()}}
    group = {"apiVersion": scheduler.POD_GROUP_API, "kind": "PodGroup", "metadata": {"name": "training", "namespace": NS},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    docs = [ns, group, gang_pod(lab, "w0", LEAVER, taints), gang_pod(lab, "w1", STAYER, taints)]
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))

    def gang() -> list[dict]:
        return json.loads(kubectl(lab, "get", "pods", "-n", NS, "-o", "json").stdout)["items"]

    wait("the gang runs on both nodes", lambda: len(gang()) == 2 and all(
        p["status"].get("phase") == "Running" for p in gang()))

    # the user's steps: the file without the node, then `skyrack plan`: the range stays reserved
    proc = run_cli("plan", str(smaller))
    assert proc.returncode == 0, proc.stderr
    assert f"Leaving: {LEAVER}" in proc.stdout
    lock = yaml.safe_load(planmod.lock_path(smaller).read_text())
    assert lock["leaving"] == {LEAVER: leaver.pod_cidr} and LEAVER not in lock["nodes"]
    assert f"{leaver.pod_cidr} via {leaver.ip}" in lab.ssh(STAYER, "ip -4 route show")

    runs = tmp_path / "runs"
    # a dry run says who would leave and what would be relabelled, and changes none of it
    proc = run_cli("join", str(smaller), "--runs-dir", str(runs), "--outputs", str(outputs), "--check", timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"would drain, reset and delete {LEAVER} (removed) (rack r01)" in proc.stderr
    assert "would bring the labels and taints of Node r02-n01 to the plan's" in proc.stderr
    assert kubectl(lab, "get", "node", LEAVER, check=False).returncode == 0 and len(gang()) == 2
    assert team_of(lab, "r02-n01") == ("robotics", ["robotics"])
    assert LEAVER in yaml.safe_load(planmod.lock_path(smaller).read_text())["leaving"]

    data = join(smaller, runs, outputs)
    assert data["departed"] == [LEAVER] and data["released"] == [LEAVER]
    # the whole gang went, its pod on the node that stays too: never one pod of it
    assert gang() == []
    # the Node is gone, the host reset, the lock let the range go
    assert kubectl(lab, "get", "node", LEAVER, check=False).returncode != 0
    for path in ("/etc/kubernetes/kubelet.conf", "/etc/cni/net.d/10-skyrack.conflist",
                 "/etc/systemd/system/skyrack-pod-routes.service"):
        assert lab.ssh(LEAVER, f"test -e {path} && echo present || echo absent").strip() == "absent", path
    assert lab.ssh(LEAVER, "systemctl is-active kubelet", check=False).strip() != "active"
    # no pod's container is left running (kubeadm reset removes them through the CRI)
    assert lab.ssh(LEAVER, "ctr -n k8s.io tasks ls -q | wc -l").strip() == "0"
    assert " via " not in lab.ssh(LEAVER, f"ip -4 route show root {p_full.env.kubernetes.pod_cidr} proto boot")
    # ... and the routes someone else made stay: here the lab's stand-in for the site's routes to the API server's
    # pods (skyrack.lab.network.fabric_routes), which the reset once removed with the node's own
    api = p_full.members_of("apiserver")[0]
    assert f"{api.pod_cidr} via {api.ip}" in lab.ssh(LEAVER, f"ip -4 route show root {p_full.env.kubernetes.pod_cidr}")
    assert lab.ssh(LEAVER, "ip link show cni0 >/dev/null 2>&1 && echo present || echo absent").strip() == "absent"
    assert "skyrack-pod-egress" not in lab.ssh(LEAVER, "iptables -w -t nat -S POSTROUTING")
    assert "leaving" not in yaml.safe_load(planmod.lock_path(smaller).read_text())
    # the node that stays no longer routes the range that left
    assert leaver.pod_cidr not in lab.ssh(STAYER, "ip -4 route show")
    assert {h for hosts in RACKS.values() for h in hosts} == set(changed(data))
    # r02 moved to team vision: kubelet set its labels and taints at registration only; the join brought them over
    assert data["relabelled"] == ["r02-n01"] and team_of(lab, "r02-n01") == ("vision", ["vision"])

    # again: nothing leaves, nothing changes
    again = join(smaller, runs, outputs)
    assert again["departed"] == [] and again["relabelled"] == [] and set(changed(again).values()) == {0}, \
        changed(again)
    # and the reset itself, run again on the host, changes nothing
    p = planmod.make(smaller)
    run = driver.run_rack(p, "r01", [LEAVER], driver.JoinOptions(runs_dir=runs.resolve()), None, {},
                          Console(quiet=True), playbook=departures.LEAVE_PLAYBOOK,
                          inv_data=departures.reset_inventory(p, {LEAVER: leaver.ip}, None))
    assert [(h.result, h.changed) for h in run.hosts] == [("ok", 0)], run.hosts[0].message


def test_the_node_put_back_in_the_file_joins_again(lab, outputs, tmp_path):
    data = join(lab.env, tmp_path / "runs", outputs)
    assert changed(data)[LEAVER] > 0 and data["departed"] == [] and data["relabelled"] == ["r02-n01"]
    assert team_of(lab, "r02-n01") == ("robotics", ["robotics"])
    wait(f"{LEAVER} Ready again", lambda: any(
        n["name"] == LEAVER and n["ready"] for n in lab.nodes(all_ready=False)), timeout=300)
    lab.ready()
    again = join(lab.env, tmp_path / "runs", outputs)
    assert set(changed(again).values()) == {0} and again["relabelled"] == [], changed(again)
    kubectl(lab, "delete", "namespace", NS, "--wait=false", check=False)
