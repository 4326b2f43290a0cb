"""The simulated fleet's pieces that need no lab: the Nodes it registers, KWOK's stages, the bench's arithmetic.

tests/lab/test_kubernetes_fleet.py registers 200 of these Nodes with a real API server and KWOK.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml

from skyrack import plan as planmod
from skyrack.errors import InputError
from skyrack.lab import fleet
from support import CONFIGS, ROOT, run_cli


@pytest.fixture(scope="module")
def prod() -> planmod.Plan:
    return planmod.make(CONFIGS / "prod.yaml")


def test_a_simulated_node_is_what_the_join_registers_for_that_planned_node(prod):
    n = prod.nodes[70]  # rack r002, team language, H100s
    doc = fleet.node_manifest(n, prod)
    meta, spec, status = doc["metadata"], doc["spec"], doc["status"]
    assert meta["name"] == n.name == "r002-n07"
    assert meta["labels"] == {**planmod.node_labels(prod.env, prod.env.racks[1]), "kubernetes.io/hostname": n.name,
                              "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", fleet.SIMULATED_LABEL: "true"}
    assert meta["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert spec["taints"] == [{"key": "skyrack.io/team", "value": "language", "effect": "NoSchedule"},
                              {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert spec["podCIDR"] == n.pod_cidr and spec["podCIDRs"] == [n.pod_cidr]
    # DGX H100 (224 CPUs, 2 TiB) less the plan's kubelet reservation; 8 GPUs as the device plugin reports
    assert status["capacity"] == {"pods": "32", "cpu": "224", "memory": "2048Gi", "nvidia.com/gpu": "8"}
    r = n.reservation
    assert status["allocatable"] == {"pods": "32", "cpu": f"{224_000 - r.kube_cpu_m - r.system_cpu_m}m",
                                     "memory": f"{2048 * 1024 - r.kube_memory_mi - r.system_memory_mi - r.eviction_memory_mi}Mi",
                                     "nvidia.com/gpu": "8"}
    assert status["addresses"] == [{"type": "InternalIP", "address": n.ip}, {"type": "Hostname", "address": n.name}]


def test_the_fleet_is_the_plans_nodes_in_rack_order(prod):
    docs = fleet.manifests(prod, 130)
    assert [d["metadata"]["name"] for d in docs] == [n.name for n in prod.nodes[:130]]
    assert docs[-1]["metadata"]["labels"]["skyrack.io/rack"] == "r003"


@pytest.mark.parametrize("count", [0, 7681])
def test_a_fleet_the_plan_does_not_hold_is_refused(prod, count):
    with pytest.raises(InputError) as exc:
        fleet.manifests(prod, count)
    assert "plans 7680 nodes; give 1 to 7680" in str(exc.value) and "prod.yaml" in str(exc.value)


def test_kwoks_heartbeat_reports_status_at_kubelets_frequency(tmp_path):
    (tmp_path / "stages").mkdir()
    upstream = [{"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "node-heartbeat-with-lease"},
                 "spec": {"delay": {"durationMilliseconds": 600000, "jitterDurationMilliseconds": 610000}}},
                {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-ready"},
                 "spec": {"delay": {"durationMilliseconds": 1}}}]
    for d in upstream:
        (tmp_path / "stages" / f"{d['metadata']['name']}.yaml").write_text(yaml.safe_dump(d))
    docs = list(yaml.safe_load_all(fleet.stages(tmp_path)))
    assert docs[0]["kind"] == "KwokConfiguration" and docs[0]["options"]["nodeLeaseParallelism"] >= 64
    got = {d["metadata"]["name"]: d for d in docs[1:]}
    assert got["node-heartbeat-with-lease"]["spec"]["delay"] == {"durationMilliseconds": 300000,
                                                                  "jitterDurationMilliseconds": 310000}
    assert got["pod-ready"] == upstream[1]


def _bench():
    spec = importlib.util.spec_from_file_location("fleet_scale", Path(ROOT) / "bench/fleet_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_benchs_quantiles_are_prometheus_histogram_quantile():
    q = _bench().quantile
    # 100 calls: 50 under 0.1 s, 40 more under 0.5 s, 10 more under 1 s
    buckets = {0.1: 50, 0.5: 90, 1.0: 100, float("inf"): 100}
    assert q(0.5, buckets) == pytest.approx(0.1)
    assert q(0.75, buckets) == pytest.approx(0.1 + 0.4 * 25 / 40)
    assert q(0.99, buckets) == pytest.approx(0.5 + 0.5 * 9 / 10)
    assert q(0.99, {0.1: 0, 1.0: 0, float("inf"): 5}) == 1.0  # beyond the last bound: that bound
    assert q(0.99, {0.1: 0, float("inf"): 0}) is None


def test_the_bench_classes_calls_by_the_slos_units():
    b = _bench()
    key_post = ("POST", "pods", "", "resource")
    key_list = ("LIST", "nodes", "", "cluster")
    key_watch = ("WATCH", "pods", "", "cluster")
    before = {"buckets": {key_post: {0.1: 10, 2.0: 10, float("inf"): 10}}, "gauges": {}}
    after = {"buckets": {key_post: {0.1: 10, 2.0: 30, float("inf"): 30}, key_list: {1.0: 4, 60.0: 5, float("inf"): 5},
                         key_watch: {0.1: 3, float("inf"): 3}}, "gauges": {}}
    lat = b.latencies(before, after)
    assert set(lat) == {"mutating", "list-cluster"}  # watches are no SLO's
    assert lat["mutating"]["calls"] == 20 and lat["mutating"]["worst"] == "POST pods"
    assert lat["mutating"]["within_slo"] is False  # 20 new calls all between 0.1 s and 2 s: p99 1.9 s > 1 s
    assert lat["list-cluster"]["calls"] == 5 and lat["list-cluster"]["within_slo"] is False


def _stat(pid: int, comm: str, utime: int, stime: int) -> str:
    # /proc/PID/stat: pid (comm) state ppid ... with utime and stime the 14th and 15th fields
    rest = ["S", "1"] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 30
    return f"{pid} ({comm}) {' '.join(rest)}\n"


def test_the_bench_reads_control_plane_cpu_by_process_and_survives_a_restart(tmp_path, monkeypatch):
    b = _bench()
    monkeypatch.setattr(b.os, "sysconf", lambda name: 100)  # clock ticks per second
    proc = tmp_path / "proc"

    def write(stats: dict[int, tuple[str, int, int]]) -> None:
        if proc.exists():
            shutil.rmtree(proc)
        for pid, (comm, ut, st) in stats.items():
            (proc / str(pid)).mkdir(parents=True)
            (proc / str(pid) / "stat").write_text(_stat(pid, comm, ut, st))
        (proc / "self").mkdir(exist_ok=True)  # not a PID: ignored

    write({10: ("kube-apiserver", 1000, 500), 11: ("etcd", 200, 100), 12: ("bash", 9999, 0),
           13: ("kube-controller", 50, 50)})
    before = b.cpu_sample(proc)
    assert before[10] == ("apiserver", 15.0) and 12 not in before and before[13][0] == "controller-manager"
    # 10 s later: the API server used 12 s of CPU; etcd's process restarted (a new PID, 3 s since)
    write({10: ("kube-apiserver", 1800, 900), 21: ("etcd", 200, 100), 13: ("kube-controller", 50, 50)})
    used = b.cores(before, b.cpu_sample(proc), 10.0)
    assert used == {"apiserver": 1.2, "controller-manager": 0.0, "etcd": 0.3}
    idle, busy = {"cores": {"apiserver": 0.2, "etcd": 0.1}}, {"cores": used}
    assert b.per_thousand(idle, busy, 2000) == {"apiserver": 0.5, "controller-manager": 0.0, "etcd": 0.1}


class Clock:
    """A clock that moves only when the wait sleeps."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_the_ready_wait_ends_when_all_are_ready_or_fails_below_the_fraction_at_the_deadline():
    wanted = {f"n{i}" for i in range(10)}
    states = iter([{n: i < 3 for i, n in enumerate(sorted(wanted))}, dict.fromkeys(wanted, True)])
    clock = Clock()
    assert fleet.wait_ready(lambda: next(states), wanted, 60, clock=clock, sleep=clock.sleep) == 10
    assert clock.t == 2  # one poll missed some, the next found all
    nine = {n: n != "n0" for n in wanted}  # a machine that keeps 9 of 10 Ready, never all
    clock = Clock()
    with pytest.raises(fleet.LabError, match=r"^1 of 10 simulated nodes not Ready after 60 s; KWOK's log: k.log$"):
        fleet.wait_ready(lambda: nine, wanted, 60, clock=clock, sleep=clock.sleep, log=Path("k.log"))
    assert 60 < clock.t <= 64  # it waited the whole timeout, not more
    clock = Clock()
    assert fleet.wait_ready(lambda: nine, wanted, 60, min_ready=0.9, clock=clock, sleep=clock.sleep) == 9
    clock = Clock()
    with pytest.raises(fleet.LabError, match="1 of 10"):
        fleet.wait_ready(lambda: nine, wanted, 60, min_ready=0.95, clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize("fraction", ["0", "1.5"])
def test_a_ready_fraction_outside_zero_to_one_is_refused_before_anything_runs(fraction):
    proc = run_cli("lab", "fleet", "up", str(CONFIGS / "lab.yaml"), "--min-ready", fraction)
    assert proc.returncode == 2 and "--min-ready" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
