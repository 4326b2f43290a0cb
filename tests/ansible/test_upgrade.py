"""join/upgrade.py and the join driver's upgrade of a rack: the guards read from the cluster's versions, the
batches, and the order each batch keeps (annotate and drain, play, uncordon, Ready at the new version), with a
stand-in API server whose kubelets move to the version the play installed."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from skyrack import plan as planmod
from skyrack.join import driver, records, upgrade
from skyrack.join.records import HostResult, RackRun
from skyrack.kube import drain as drainmod

ROOT = Path(__file__).resolve().parents[2]


def node(name: str, kubelet: str, *, ready: bool = True, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": name, "annotations": dict(annotations or {})},
            "spec": {},
            "status": {"nodeInfo": {"kubeletVersion": f"v{kubelet}"},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.fixture
def lab() -> planmod.Plan:
    return planmod.make(ROOT / "configs" / "lab.yaml")


def test_versions_are_read_as_the_api_server_and_kubelets_write_them():
    assert upgrade.version("v1.37.2") == (1, 37, 2)
    assert upgrade.version("v1.38.0-rc.1+skyrack") == (1, 38, 0)
    assert upgrade.version("1.36.9") == (1, 36, 9)
    assert upgrade.version("") is None and upgrade.version("latest") is None


def test_racks_are_never_upgraded_ahead_of_the_control_plane(lab: planmod.Plan):
    target = lab.env.kubernetes.version
    major, minor, _ = upgrade.version(target)
    behind = (major, minor - 1, 4)
    with pytest.raises(upgrade.UpgradeRefused) as exc:
        upgrade.guard(lab, behind, [node("r01-n01", upgrade.show(behind))], "configs/lab.yaml")
    text = str(exc.value)
    assert f"the plan gives the racks Kubernetes {target} and the control plane runs {upgrade.show(behind)}" in text
    assert "`skyrack upgrade configs/lab.yaml --plan`" in text
    # a patch behind is ahead too
    older_patch = (major, minor, upgrade.version(target)[2] - 1) if upgrade.version(target)[2] else None
    if older_patch:
        with pytest.raises(upgrade.UpgradeRefused):
            upgrade.guard(lab, older_patch, [], "configs/lab.yaml")


def test_a_node_more_than_one_minor_behind_is_refused_naming_it(lab: planmod.Plan):
    target = upgrade.version(lab.env.kubernetes.version)
    two_behind = upgrade.show((1, target[1] - 2, 7))
    with pytest.raises(upgrade.UpgradeRefused, match=rf"r01-n02 runs {two_behind}.*one minor at a time"):
        upgrade.guard(lab, target, [node("r01-n01", upgrade.show(target)), node("r01-n02", two_behind)], "lab.yaml")


def test_a_plan_older_than_a_planned_node_is_a_downgrade_refused_naming_it(lab: planmod.Plan):
    target = upgrade.version(lab.env.kubernetes.version)
    newer = upgrade.show((1, target[1], target[2] + 1))
    with pytest.raises(upgrade.UpgradeRefused, match=rf"r02-n01 runs {newer}\): a downgrade"):
        upgrade.guard(lab, (1, target[1], target[2] + 1),
                      [node("r01-n01", upgrade.show(target)), node("r02-n01", newer)], "lab.yaml")
    # a node that is not the plan's may run anything: it is only reported as skew
    next_minor = upgrade.show((1, target[1] + 1, 0))
    found = upgrade.guard(lab, target, [node("gone-n09", next_minor)], "lab.yaml")
    assert found.behind == {} and found.skew == [f"gone-n09: kubelet {next_minor} is newer than the API server "
                                                 f"({upgrade.show(target)})"]


def test_nodes_behind_and_nodes_an_upgrade_left_cordoned_are_found_and_skew_is_reported(lab: planmod.Plan):
    target = upgrade.version(lab.env.kubernetes.version)
    cur, prev = upgrade.show(target), upgrade.show((1, target[1] - 1, 3))
    found = upgrade.guard(lab, target, [
        node("r01-n01", cur),                                                    # at the plan's: stays
        node("r01-n02", prev),                                                   # one minor behind
        node("r02-n01", cur, annotations={upgrade.UPGRADING: cur}),              # upgraded, not released
        node("gone-n09", upgrade.show((1, target[1] - 4, 0))),                   # not the plan's: skew only
    ], "lab.yaml")
    assert found.behind == {"r01-n02": prev, "r02-n01": f"{cur}, its upgrade not finished"}
    assert found.skew == [f"gone-n09: kubelet 1.{target[1] - 4}.0 is more than 3 minors older than the API server "
                          f"({cur})"]


@pytest.mark.parametrize(("hosts", "serial", "sizes"), [
    (10, [1, "20%"], [1, 2, 2, 2, 2, 1]),
    (10, [3, "50%"], [3, 5, 2]),
    (2, [1, "20%"], [1, 1]),  # a share below one host is one host
    (4, [10], [4]),
    (0, [1], []),
])
def test_batches_follow_ansibles_serial(hosts: int, serial: list, sizes: list[int]):
    names = [f"n{i}" for i in range(hosts)]
    got = upgrade.batches(names, serial)
    assert [len(b) for b in got] == sizes
    assert [h for b in got for h in b] == names


class Cluster:
    """Nodes with no pods to move (the drain's eviction logic has its own tests: tests/kube/test_drain.py); a
    node's kubelet reports the version the play installed once it runs again (after the uncordon)."""

    def __init__(self, names: list[str], old: str):
        self.nodes = {n: node(n, old) for n in names}
        self.installed: dict[str, str] = {}
        self.log: list[str] = []

    def __call__(self, method: str, path: str, body: dict | None = None, *, patch: bool = False) -> dict:
        if path.startswith("/api/v1/pods?fieldSelector="):
            return {"items": []}
        name = path.rsplit("/", 1)[1]
        n = self.nodes[name]
        if method == "PATCH":
            assert patch
            for k, v in (body.get("metadata", {}).get("annotations") or {}).items():
                if v is None:
                    n["metadata"]["annotations"].pop(k, None)
                    self.log.append(f"unannotate {name}")
                else:
                    n["metadata"]["annotations"][k] = v
                    self.log.append(f"annotate {name} {v}")
            if "spec" in body:
                n["spec"]["unschedulable"] = body["spec"]["unschedulable"]
                self.log.append(f"{'cordon' if body['spec']['unschedulable'] else 'uncordon'} {name}")
            return {}
        if name in self.installed:
            n["status"]["nodeInfo"]["kubeletVersion"] = f"v{self.installed[name]}"
        return n


def roll(cluster: Cluster, hosts: list[str], serial: list, fail: set[str], target=(1, 38, 0)):
    said: list[str] = []

    def play(batch: list[str]) -> dict[str, str]:
        cluster.log.append(f"play {','.join(batch)}")
        for h in batch:
            if h not in fail:
                cluster.installed[h] = upgrade.show(target)
        return {h: "kubeadm upgrade node: failed" for h in batch if h in fail}

    r = upgrade.Roll(cluster, target, serial, drainmod.DrainOptions(timeout_s=60), said.append, ready_timeout_s=30)
    return (*r.run(hosts, play), said)


def test_each_batch_is_drained_played_and_released_in_that_order():
    c = Cluster(["a", "b", "c"], "1.37.2")
    failed, not_run, said = roll(c, ["a", "b", "c"], [1, 2], set())
    assert (failed, not_run) == ({}, [])
    assert c.log == ["annotate a 1.38.0", "cordon a", "play a", "unannotate a", "uncordon a",
                     "annotate b 1.38.0", "annotate c 1.38.0", "cordon b", "cordon c", "play b,c",
                     "unannotate b", "uncordon b", "unannotate c", "uncordon c"]
    assert said[0] == "upgrade batch 1/2 to 1.38.0: a"
    assert all(not n["spec"]["unschedulable"] and not n["metadata"]["annotations"] for n in c.nodes.values())


def test_a_batch_over_the_failure_share_stops_the_rack_and_its_failed_node_stays_cordoned():
    c = Cluster(list("abcde"), "1.37.2")
    failed, not_run, said = roll(c, list("abcde"), [1, 2], {"c"})
    assert failed == {"c": "kubeadm upgrade node: failed"}
    assert not_run == ["d", "e"]  # 1 of 2 failed: 50 % > 34 %
    assert c.nodes["c"]["spec"]["unschedulable"] is True
    assert c.nodes["c"]["metadata"]["annotations"] == {upgrade.UPGRADING: "1.38.0"}  # the retry resumes there
    assert "play d" not in " ".join(c.log)
    assert any("c: kubeadm upgrade node: failed (left cordoned" in line for line in said)


def test_a_node_that_is_not_ready_at_the_new_version_fails_after_the_wait(monkeypatch: pytest.MonkeyPatch):
    c = Cluster(["a"], "1.37.2")  # the play "succeeds" and kubelet still reports the old version
    clock = {"t": 0.0}
    real_wait = upgrade.wait_ready
    monkeypatch.setattr(upgrade, "wait_ready", lambda call, names, target, timeout_s: real_wait(
        call, names, target, timeout_s=timeout_s, clock=lambda: clock["t"],
        sleep=lambda s: clock.__setitem__("t", clock["t"] + s)))
    r = upgrade.Roll(c, (1, 38, 0), [1], drainmod.DrainOptions(timeout_s=60), lambda m: None, ready_timeout_s=30)
    failed, not_run = r.run(["a"], lambda batch: {})
    assert failed == {"a": "kubelet 1.37.2, not Ready at 1.38.0 30 s after the upgrade"}
    assert not_run == []  # the rack had no other batch
    assert c.nodes["a"]["spec"]["unschedulable"] is True  # never back in service at the old version
    assert c.nodes["a"]["metadata"]["annotations"] == {upgrade.UPGRADING: "1.38.0"}


def test_a_drain_that_fails_puts_the_batch_back_in_service_and_runs_nothing():
    c = Cluster(["a", "b"], "1.37.2")
    calls = []

    def refuse(method: str, path: str, body: dict | None = None, *, patch: bool = False) -> dict:
        if path.startswith("/api/v1/pods?"):
            return {"items": [{"metadata": {"name": "db-0", "namespace": "team"}, "spec": {"nodeName": "a"},
                               "status": {"phase": "Running"}}]}
        if path.endswith("/eviction"):
            from skyrack.kube.health import ApiError
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
        calls.append(path)
        return c(method, path, body, patch=patch)

    r = upgrade.Roll(refuse, (1, 38, 0), [1], drainmod.DrainOptions(timeout_s=0, interval_s=0), lambda m: None)
    failed, not_run = r.run(["a", "b"], lambda batch: pytest.fail("no play after a failed drain"))
    assert list(failed) == ["a"] and failed["a"].startswith("drain: ")
    assert not_run == ["b"]
    assert not c.nodes["a"]["spec"]["unschedulable"] and not c.nodes["a"]["metadata"]["annotations"]


def test_a_racks_upgrade_is_one_record_that_retry_failed_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               lab: planmod.Plan):
    rack, hosts = "r01", [n.name for n in lab.nodes if n.rack == "r01"]
    assert len(hosts) == 2
    c = Cluster(hosts, "1.37.2")
    monkeypatch.setattr(driver, "cluster", lambda data: contextlib.nullcontext(c))
    opts = driver.JoinOptions(runs_dir=tmp_path / "runs")
    seen: list[tuple[list[str], bool]] = []

    def run(batch: list[str], o: driver.JoinOptions, part: Path) -> RackRun:
        seen.append((batch, o.extravars.get("skyrack_upgrading", False)))
        assert part.parent == opts.runs_dir
        out = RackRun(env="lab", rack=rack, check=False, record=str(part), started=1.0)
        for h in batch:
            bad = h == hosts[1]
            out.hosts.append(HostResult(host=h, rack=rack, result="failed" if bad else "ok",
                                        message="apt: held packages" if bad else ""))
            if not bad:
                c.installed[h] = "1.38.0"
        return out

    result = driver.upgrade_rack(lab, rack, hosts, hosts, (1, 38, 0), opts, {}, Console(file=None, quiet=True), run)
    assert seen == [([hosts[0]], True), ([hosts[1]], True)]  # [1, "20%"]: one node, then one more
    assert result.failed_hosts == [hosts[1]]
    last = records.latest(opts.runs_dir, "lab", rack)
    assert last is not None and last["failed_hosts"] == [hosts[1]]
    assert [h["message"] for h in last["hosts"]] == ["", "apt: held packages"]
    opts.retry_failed = True
    assert driver.select(lab, opts) == [(rack, [hosts[1]])]


def test_the_upgrade_batch_size_is_validated_where_it_is_written(tmp_path: Path):
    from skyrack.config.validate import load
    from skyrack.errors import InputError

    for f in ("lab.yaml", "lab.lock.yaml"):
        shutil.copy(ROOT / "configs" / f, tmp_path / f)
    data = yaml.safe_load((tmp_path / "lab.yaml").read_text())
    data.setdefault("join", {})["upgrade_serial"] = [1, "0%"]
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as exc:
        load(tmp_path / "lab.yaml")
    assert [str(p) for p in exc.value.problems if "upgrade_serial" in p.path] == [
        f"{tmp_path / 'lab.yaml'}: join.upgrade_serial: item 1 ('0%') is neither a number of nodes (1 to 100000) "
        "nor a share of the rack's (1% to 100%)"]
