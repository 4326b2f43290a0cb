"""kube/drain.py against an API that behaves as the API server does for a drain: cordon is a merge patch,
an eviction deletes the pod (terminating first, gone on a later list) unless a budget refuses it (429),
a dry-run eviction changes nothing. The clock is the test's."""

from __future__ import annotations

import pytest

from skyrack.kube import drain
from skyrack.kube.health import ApiError


def pod(name: str, node: str, ns: str = "team", *, gang: str | None = None, owner: str | None = None,
        phase: str = "Running", mirror: bool = False) -> dict:
    meta: dict = {"name": name, "namespace": ns}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    if mirror:
        meta["annotations"] = {drain.MIRROR_ANNOTATION: "hash"}
    spec: dict = {"nodeName": node}
    if gang:
        spec["schedulingGroup"] = {"podGroupName": gang}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


class FakeApi:
    def __init__(self, pods: list[dict], budgets: dict[str, int] | None = None):
        self.pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
        self.budgets = dict(budgets or {})  # pod -> evictions refused before one is allowed
        self.unschedulable: dict[str, bool] = {}
        self.evictions: list[str] = []  # real ones, in order
        self.dry_runs: list[str] = []
        self.terminating: set[str] = set()

    def __call__(self, method: str, path: str, body: dict | None = None, *, patch: bool = False) -> dict:
        if method == "PATCH" and path.startswith("/api/v1/nodes/"):
            assert patch
            self.unschedulable[path.rsplit("/", 1)[1]] = body["spec"]["unschedulable"]
            return {}
        if method == "GET" and path.startswith("/api/v1/pods?fieldSelector=spec.nodeName%3D"):
            self.settle()
            node = path.rsplit("%3D", 1)[1]
            return {"items": [p for p in self.pods.values() if p["spec"]["nodeName"] == node]}
        if method == "GET" and path.startswith("/api/v1/namespaces/") and path.endswith("/pods"):
            ns = path.split("/")[4]
            return {"items": [p for p in self.pods.values() if p["metadata"]["namespace"] == ns]}
        if method == "POST" and path.endswith("/eviction"):
            parts = path.split("/")
            key = f"{parts[4]}/{parts[6]}"
            if key not in self.pods:
                raise ApiError(404, "not found")
            if self.budgets.get(key, 0) > 0:
                if not body.get("deleteOptions"):
                    self.budgets[key] -= 1
                raise ApiError(429, f"POST {path}: HTTP 429: Cannot evict pod as it would violate the pod's "
                                    "disruption budget.")
            if body.get("deleteOptions", {}).get("dryRun") == ["All"]:
                self.dry_runs.append(key)
                return {}
            self.evictions.append(key)
            self.pods[key]["metadata"]["deletionTimestamp"] = "now"
            self.terminating.add(key)
            return {}
        raise AssertionError(f"unexpected {method} {path}")

    def settle(self) -> None:
        """Pods that were terminating at the last list are gone now."""
        for key in list(self.terminating):
            if self.pods[key]["metadata"].get("seen_terminating"):
                del self.pods[key]
                self.terminating.discard(key)
            else:
                self.pods[key]["metadata"]["seen_terminating"] = True


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def run(api: FakeApi, nodes: list[str], **opts) -> tuple[drain.DrainReport, list[str]]:
    clock, said = Clock(), []
    report = drain.drain(api, nodes, drain.DrainOptions(**opts), log=said.append, clock=clock, sleep=clock.sleep)
    return report, said


def test_a_drain_cordons_and_evicts_what_must_move_and_leaves_the_rest():
    api = FakeApi([pod("web", "n1"), pod("ds", "n1", owner="DaemonSet"), pod("mirror", "n1", mirror=True),
                   pod("done", "n1", phase="Succeeded"), pod("elsewhere", "n2")])
    report, _ = run(api, ["n1"])
    assert api.unschedulable == {"n1": True}
    assert api.evictions == ["team/web"]
    assert report.evicted == ["team/web"]
    assert {"team/ds", "team/mirror", "team/done", "team/elsewhere"} <= set(api.pods)


def test_a_budget_that_refuses_is_retried_until_it_allows():
    api = FakeApi([pod("db-0", "n1")], budgets={"team/db-0": 3})
    report, said = run(api, ["n1"], interval_s=5)
    assert api.evictions == ["team/db-0"]
    assert any("disruption budget" in line for line in said)
    assert report.seconds >= 15  # three refusals, one interval each


def test_a_budget_that_never_allows_fails_the_drain_naming_the_pod():
    api = FakeApi([pod("db-0", "n1")], budgets={"team/db-0": 10**6})
    with pytest.raises(drain.DrainError, match=r"n1 not drained after 60 s: 1 pod\(s\) left: team/db-0 .*budget"):
        run(api, ["n1"], timeout_s=60)


def test_a_gang_is_evicted_whole_across_nodes_never_one_pod_of_it():
    api = FakeApi([pod("w0", "n1", gang="job"), pod("w1", "n2", gang="job"), pod("w2", "n3", gang="job"),
                   pod("other", "n2", gang="other-job")])
    report, said = run(api, ["n1"])
    assert sorted(api.evictions) == ["team/w0", "team/w1", "team/w2"]
    assert "team/other" not in api.evictions
    assert report.gangs == ["team/job"]
    assert any("gang team/job: evicted whole (3 pods)" in line for line in said)


def test_a_gang_one_of_whose_pods_a_budget_holds_is_not_evicted_at_all():
    api = FakeApi([pod("w0", "n1", gang="job"), pod("w1", "n2", gang="job")], budgets={"team/w1": 10**6})
    with pytest.raises(drain.DrainError, match=r"gang team/job \(a budget refuses 1 of its 2 pods, so none is evicted"):
        run(api, ["n1"], timeout_s=30)
    assert api.evictions == []  # all or none


def test_a_gang_gets_its_wait_to_finish_before_it_is_evicted():
    api = FakeApi([pod("w0", "n1", gang="job"), pod("w1", "n2", gang="job")])
    finished_at = 40.0
    clock, said = Clock(), []

    def sleep(s: float) -> None:
        clock.sleep(s)
        if clock.t >= finished_at:
            for p in api.pods.values():
                p["status"]["phase"] = "Succeeded"

    report = drain.drain(api, ["n1"], drain.DrainOptions(gang_wait_s=120, interval_s=10), log=said.append,
                         clock=clock, sleep=sleep)
    assert api.evictions == []  # it finished within its wait: nothing evicted
    assert report.evicted == []
    assert any("waiting up to 120 s" in line for line in said)


def test_a_gang_that_outlives_its_wait_is_evicted_whole_after_it():
    api = FakeApi([pod("w0", "n1", gang="job"), pod("w1", "n2", gang="job")])
    clock = Clock()
    evicted_at: list[float] = []
    real = api.__call__

    def call(method: str, path: str, body: dict | None = None, *, patch: bool = False) -> dict:
        if method == "POST" and not (body or {}).get("deleteOptions"):
            evicted_at.append(clock.t)
        return real(method, path, body, patch=patch)

    drain.drain(call, ["n1"], drain.DrainOptions(gang_wait_s=60, interval_s=10), log=lambda _: None,
                clock=clock, sleep=clock.sleep)
    assert sorted(api.evictions) == ["team/w0", "team/w1"]
    assert min(evicted_at) >= 60


def test_replacements_of_an_evicted_gang_elsewhere_are_left_alone():
    """A Job makes new pods for a gang it lost: they run on other nodes and are not the drain's."""
    api = FakeApi([pod("w0", "n1", gang="job"), pod("w1", "n2", gang="job")])
    real = api.__call__

    def call(method: str, path: str, body: dict | None = None, *, patch: bool = False) -> dict:
        answer = real(method, path, body, patch=patch)
        if method == "POST" and path.endswith("/w1/eviction") and not (body or {}).get("deleteOptions"):
            api.pods["team/w9"] = pod("w9", "n3", gang="job")  # the controller's replacement
        return answer

    drain.drain(call, ["n1"], drain.DrainOptions(), log=lambda _: None, clock=Clock(), sleep=lambda _: None)
    assert sorted(api.evictions) == ["team/w0", "team/w1"]
    assert "team/w9" in api.pods


@pytest.mark.parametrize("toleration", [
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Equal"},
    {"operator": "Exists"},
])
def test_a_controller_whose_pods_tolerate_the_cordon_is_named_and_the_deadline_says_why(toleration):
    """Its replacement is scheduled back onto the cordoned node after each eviction: the drain cannot end,
    and says so once while it tries and in its error, instead of a list of ever-new pod names."""
    def web(i: int) -> dict:
        p = pod(f"web-{i}", "n1", owner="ReplicaSet")
        p["metadata"]["ownerReferences"][0]["name"] = "web"
        p["spec"]["tolerations"] = [toleration]
        return p

    api = FakeApi([web(0)])
    real, made = api.__call__, [0]

    def call(method: str, path: str, body: dict | None = None, *, patch: bool = False) -> dict:
        answer = real(method, path, body, patch=patch)
        if method == "POST" and not (body or {}).get("deleteOptions"):
            made[0] += 1
            api.pods[f"team/web-{made[0]}"] = web(made[0])  # the ReplicaSet's replacement, on the same node
        return answer

    clock, said = Clock(), []
    with pytest.raises(drain.DrainError, match=r"team/ReplicaSet/web tolerate\(s\) the cordon .*drop that toleration"):
        drain.drain(call, ["n1"], drain.DrainOptions(timeout_s=60, interval_s=5), log=said.append, clock=clock,
                    sleep=clock.sleep)
    assert made[0] > 3  # evicted again and again
    assert [line for line in said if "tolerate the cordon" in line] == [
        "team/ReplicaSet/web: its pods tolerate the cordon (node.kubernetes.io/unschedulable), so a replacement "
        "may be scheduled back onto n1 and be evicted again"]


@pytest.mark.parametrize("toleration", [
    {"key": "skyrack.io/team", "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Equal", "value": "x"},
])
def test_tolerations_that_do_not_cover_the_cordon_are_not_named(toleration):
    p = pod("web", "n1")
    p["spec"]["tolerations"] = [toleration]
    assert not drain.tolerates_cordon(p)
    report, said = run(FakeApi([p]), ["n1"])
    assert report.evicted == ["team/web"] and not any("cordon (" in line for line in said)
