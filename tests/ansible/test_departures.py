"""join/departures.py: which nodes leave, and the order a departure keeps (drain, reset, delete, release).
The API and the reset are stand-ins here; tests/lab/test_departures.py removes a real node from the lab."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from skyrack import plan as planmod
from skyrack.join import departures
from skyrack.join.records import HostResult, RackRun
from skyrack.kube.health import ApiError

ROOT = Path(__file__).resolve().parents[2]


def node(name: str, ip: str, env: str = "lab", rack: str | None = "r01", **labels: str) -> dict:
    lab = {planmod.ENV_LABEL: env, **labels}
    if rack:
        lab[planmod.RACK_LABEL] = rack
    return {"metadata": {"name": name, "labels": lab},
            "status": {"addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]}}


@pytest.fixture
def lab_copy(tmp_path: Path) -> Path:
    for f in ("lab.yaml", "lab.lock.yaml"):
        shutil.copy(ROOT / "configs" / f, tmp_path / f)
    return tmp_path / "lab.yaml"


def without(path: Path, name: str) -> planmod.Plan:
    """The lab with one node fewer (r01 is a node_range of 2: the last one goes), its lock planned."""
    data = yaml.safe_load(path.read_text())
    rack = data["racks"][0]
    assert name == "r01-n02" and rack["node_range"]["count"] == 2
    rack["node_range"]["count"] = 1
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    planmod.write_lock(planmod.make(path, require_lock=False))
    return planmod.make(path)


def test_removed_and_readdressed_nodes_are_found_from_the_cluster_and_nothing_else(lab_copy: Path) -> None:
    p = without(lab_copy, "r01-n02")
    found = departures.find(p, [
        node("r01-n01", "198.18.0.131"),                      # planned, same address: stays
        node("r01-n02", "198.18.0.132"),                      # not in the file any more: removed
        node("r02-n01", "198.18.0.150", rack="r02"),          # planned at .141: re-addressed
        node("pool-cpu-0", "10.0.0.4", rack=None, **{planmod.POOL_LABEL: "cpu"}),  # a cloud pool's: the autoscaler's
        node("r09-n01", "198.18.0.199", env="dev"),           # another environment's
    ])
    assert [(d.name, d.rack, d.ip, d.why) for d in found] == [
        ("r01-n02", "r01", "198.18.0.132", "removed"),
        ("r02-n01", "r02", "198.18.0.141", "re-addressed"),  # reached at its new address
    ]
    assert found[1].describe() == "r02-n01 (re-addressed: 198.18.0.150 → 198.18.0.141)"
    assert departures.select(found, "r02", None) == [found[1]]
    assert departures.select(found, None, ["r01-n02"]) == [found[0]]


class FakeCluster:
    def __init__(self, names: list[str]):
        self.nodes = set(names)
        self.calls: list[str] = []

    def __call__(self, method: str, path: str, body: dict | None = None, *, patch: bool = False) -> dict:
        self.calls.append(f"{method} {path.split('?')[0]}")
        if path.startswith("/api/v1/pods?"):
            return {"items": []}
        name = path.rsplit("/", 1)[1]
        if method == "PATCH":
            return {}
        if method == "DELETE":
            self.nodes.discard(name)
            return {}
        if method == "GET":
            if name not in self.nodes:
                raise ApiError(404, "not found")
            return {}
        raise AssertionError(path)


def reset_run(ok: bool, order: list[str]):
    def reset(rack: str, hosts: dict[str, str]) -> RackRun:
        order.append(f"reset {','.join(hosts)}")
        run = RackRun(env="lab", rack=rack, check=False, record="-", started=0, playbook="leave.yml")
        run.hosts = [HostResult(host=h, rack=rack, result="ok" if ok else "failed", message="" if ok else "boom")
                     for h in hosts]
        return run
    return reset


def test_a_removed_node_is_drained_then_reset_then_deleted_then_its_range_released(lab_copy: Path) -> None:
    p = without(lab_copy, "r01-n02")
    rng = str(p.allocation.leaving["r01-n02"])
    cluster, order = FakeCluster(["r01-n01", "r01-n02"]), []
    real = cluster.__call__

    def call(method: str, path: str, body: dict | None = None, *, patch: bool = False) -> dict:
        order.append(f"{method} {path.split('?')[0]}")
        return real(method, path, body, patch=patch)

    out = departures.leave(p, [departures.Departure("r01-n02", "r01", "198.18.0.132", "removed")], call,
                           Console(quiet=True), reset_run(True, order), departures.drainmod.DrainOptions())
    steps = [s for s in order if s.startswith(("PATCH", "reset", "DELETE"))]
    assert steps == ["PATCH /api/v1/nodes/r01-n02", "reset r01-n02", "DELETE /api/v1/nodes/r01-n02"]
    assert "r01-n02" not in cluster.nodes and out.released == ["r01-n02"] and not out.failed
    lock = yaml.safe_load(lab_copy.with_name("lab.lock.yaml").read_text())
    assert "leaving" not in lock and rng not in lock["nodes"].values()


def test_a_node_whose_reset_failed_keeps_its_node_object_and_its_range(lab_copy: Path) -> None:
    p = without(lab_copy, "r01-n02")
    cluster, order = FakeCluster(["r01-n02"]), []
    out = departures.leave(p, [departures.Departure("r01-n02", "r01", "198.18.0.132", "removed")], cluster,
                           Console(quiet=True), reset_run(False, order), departures.drainmod.DrainOptions())
    assert out.failed == {"r01-n02": "reset: boom"} and out.released == []
    assert "r01-n02" in cluster.nodes and not any(c.startswith("DELETE") for c in cluster.calls)
    assert "r01-n02" in yaml.safe_load(lab_copy.with_name("lab.lock.yaml").read_text())["leaving"]


def test_a_readdressed_node_keeps_its_range(lab_copy: Path) -> None:
    p = planmod.make(lab_copy)
    cluster = FakeCluster(["r02-n01"])
    out = departures.leave(p, [departures.Departure("r02-n01", "r02", "198.18.0.141", "re-addressed")], cluster,
                           Console(quiet=True), reset_run(True, []), departures.drainmod.DrainOptions())
    assert [d.name for d in out.done] == ["r02-n01"] and out.released == []
    assert "r02-n01" in yaml.safe_load(lab_copy.with_name("lab.lock.yaml").read_text())["nodes"]


def test_a_leaving_range_whose_node_never_joined_is_released_at_once(lab_copy: Path) -> None:
    p = without(lab_copy, "r01-n02")
    assert departures.stale_leaving(p, [node("r01-n01", "198.18.0.131")]) == ["r01-n02"]
    assert departures.stale_leaving(p, [node("r01-n02", "198.18.0.132")]) == []


def registered(name: str, labels: dict[str, str], taints: list[dict[str, str]]) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}


def test_a_node_moved_to_another_team_gets_the_plans_labels_and_taints_and_keeps_the_others(lab_copy: Path) -> None:
    """kubelet applies its labels and taints only when it registers: the join brings an existing Node to the plan."""
    from skyrack.join import node_objects

    data = yaml.safe_load(lab_copy.read_text())
    data["racks"][1]["team"] = "vision"  # r02 moves to vision
    lab_copy.write_text(yaml.safe_dump(data, sort_keys=False))
    p = planmod.make(lab_copy)
    old = {planmod.ENV_LABEL: "lab", planmod.RACK_LABEL: "r02", planmod.SEGMENT_LABEL: "lab",
           planmod.TEAM_LABEL: "robotics", planmod.ZONE_LABEL: "onprem-r02", "kubernetes.io/hostname": "r02-n01"}
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    team = {"key": planmod.TEAM_TAINT_KEY, "value": "robotics", "effect": "NoSchedule"}
    patches = node_objects.patches(p, [registered("r02-n01", old, [not_ready, team])])
    assert patches == {"r02-n01": {
        "metadata": {"labels": {planmod.TEAM_LABEL: "vision"}},
        "spec": {"taints": [not_ready, {"key": planmod.TEAM_TAINT_KEY, "value": "vision", "effect": "NoSchedule"}]}}}

    # a Node registered before nodes carried their L2 segment gets it (a job's `topology: segment` needs it)
    older = {k: v for k, v in old.items() if k != planmod.SEGMENT_LABEL}
    patches = node_objects.patches(p, [registered("r02-n01", {**older, planmod.TEAM_LABEL: "vision"},
                                                  [not_ready, {**team, "value": "vision"}])])
    assert patches == {"r02-n01": {"metadata": {"labels": {planmod.SEGMENT_LABEL: "lab"}}}}

    # a Node already as planned is not written to; one the plan does not hold is not this step's
    as_planned = registered("r01-n01", p.nodes[0].labels, [node_objects.taint(t) for t in p.nodes[0].taints])
    assert node_objects.patches(p, [as_planned, registered("r09-n01", old, [])]) == {}

    # a team taken away: its label and taint go (null removes a label in a merge patch)
    data["racks"][0].pop("team")
    lab_copy.write_text(yaml.safe_dump(data, sort_keys=False))
    p = planmod.make(lab_copy)
    patch = node_objects.patches(p, [as_planned])["r01-n01"]
    assert patch == {"metadata": {"labels": {planmod.TEAM_LABEL: None}}, "spec": {"taints": []}}


def test_a_rack_node_never_keeps_the_cloud_nodes_disruption_exemption(lab_copy: Path) -> None:
    """Exempt from the zones' health, a rack's failed node would go unseen by the node-lifecycle controller."""
    from skyrack.join import node_objects

    p = planmod.make(lab_copy)
    node = p.nodes[0]
    exempt = registered(node.name, {**node.labels, planmod.DISRUPTION_EXEMPT_LABEL: "true"},
                        [node_objects.taint(t) for t in node.taints])
    assert node_objects.patches(p, [exempt]) == {node.name: {"metadata": {"labels": {
        planmod.DISRUPTION_EXEMPT_LABEL: None}}}}
