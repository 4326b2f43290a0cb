"""Cluster readiness (skyrack.kube.health): what `skyrack lab ready`, `./dev lab` and the lab tests wait on.

The checks run against a fake API (objects as the API server returns them) and fake nodes; the
HTTPS client against a local TLS server; the DNS query a node runs against a local UDP server.
The same checks against the real lab: tests/lab/test_kubernetes.py.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import socket
import struct
import subprocess
import sys
import threading

import pytest

from skyrack import plan as planmod
from skyrack.kube import health, readiness

from .conftest import CONFIGS, admin_kubeconfig, https_server

NOW = dt.datetime(2026, 12, 2, 8, 0, 0, tzinfo=dt.UTC)


def stamp(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture
def plan() -> planmod.Plan:
    return planmod.make(CONFIGS / "lab.yaml")


class Cluster:
    """The objects the checks read, healthy until a test breaks one."""

    def __init__(self, p: planmod.Plan) -> None:
        self.p = p
        self.onprem = [n.name for n in p.nodes]
        self.names = [m.name for m in p.members_of("apiserver")] + self.onprem  # every Node, API servers first
        assert len(self.names) > len(self.onprem)
        self.down = False
        self.fail_after: int | None = None
        self.calls: list[str] = []
        ready = [{"type": "Ready", "status": "True"}]
        self.objects: dict[str, dict] = {
            "/readyz": {},
            **{f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}":
               {"spec": {"holderIdentity": f"api-1_{name}-uid", "renewTime": stamp(2), "leaseDurationSeconds": 15}}
               for name in health.LEASES},
            "/api/v1/nodes": {"items": [{"metadata": {"name": n}, "status": {"conditions": ready}}
                                        for n in self.names]},
            **{path: obj for ds in ("kube-proxy", "node-local-dns") for path, obj in {
                f"/apis/apps/v1/namespaces/kube-system/daemonsets/{ds}": {
                    "metadata": {"generation": 2}, "spec": {"selector": {"matchLabels": {"k8s-app": ds}}},
                    "status": {"observedGeneration": 2, "desiredNumberScheduled": len(self.names),
                               "updatedNumberScheduled": len(self.names)}},
                f"/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3D{ds}": {"items": [
                    {"spec": {"nodeName": n}, "status": {"phase": "Running", "conditions": ready}}
                    for n in self.names]}}.items()},
            "/apis/apps/v1/namespaces/kube-system/deployments/coredns": {
                "spec": {"replicas": 2}, "status": {"readyReplicas": 2}},
            "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices"
            "?labelSelector=kubernetes.io%2Fservice-name%3Dkube-dns": {"items": [{"endpoints": [
                {"addresses": ["10.32.0.5"], "conditions": {"ready": True}},
                {"addresses": ["10.32.1.5"], "conditions": {"ready": True}}]}]},
        }
        self.answers = dict.fromkeys(self.names, (0, p.api_service_ip + "\n"))
        self.asked: list[tuple[str, list[str]]] = []

    def get(self, path: str) -> tuple[dict, dt.datetime]:
        self.calls.append(path)
        if self.down or (self.fail_after is not None and len(self.calls) > self.fail_after):
            raise health.ApiError(0, f"GET {path}: ConnectionRefusedError: [Errno 111] Connection refused")
        if path not in self.objects:
            raise health.ApiError(404, f"GET {path}: HTTP 404")
        return self.objects[path], NOW

    def run_on(self, host: str, argv) -> tuple[int, str]:
        self.asked.append((host, list(argv)))
        return self.answers[host]

    def checks(self, stage: str = health.CLUSTER) -> dict[str, health.Check]:
        return {c.name: c for c in health.checks(self.p, self.get, self.run_on, stage)}


def not_ready(found: dict[str, health.Check]) -> dict[str, str]:
    return {name: c.detail for name, c in found.items() if not c.ready}


def test_a_healthy_cluster_is_ready_and_dns_is_asked_from_every_onprem_node(plan):
    c = Cluster(plan)
    found = c.checks()
    assert list(found) == ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "nodes", "kube-proxy",
                           "CoreDNS", "node-local-dns", "DNS"]
    assert not_ready(found) == {}
    assert found["nodes"].detail == f"{len(c.names)}/{len(c.names)} Ready"
    assert [h for h, _ in c.asked] == c.onprem  # where the jobs run (the lab's API servers cannot reach rack pods)
    name, server = c.asked[0][1][-2:]
    # the node's own cache: what kubelet gives every pod
    assert (name, server) == ("kubernetes.default.svc.cluster.local", plan.node_dns_ip)
    assert found["kube-scheduler"].detail == "leader api-1"


def test_the_control_plane_stage_asks_nothing_of_workers_or_addons(plan):
    """Before the cluster layer and the join: lab up waits for the API server, the controller manager and the
    scheduler (gang scheduling is its own; nothing of the layer is needed for it to lead)."""
    c = Cluster(plan)
    del c.objects["/api/v1/nodes"]
    assert not_ready(c.checks(health.CONTROL_PLANE)) == {}
    assert list(c.checks(health.CONTROL_PLANE)) == ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    assert c.asked == []


def test_the_control_plane_stage_waits_for_the_scheduler_to_lead(plan):
    c = Cluster(plan)
    del c.objects["/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"]
    assert set(not_ready(c.checks(health.CONTROL_PLANE))) == {"kube-scheduler"}


def test_coredns_without_a_ready_endpoint_is_named_and_dns_is_not_asked(plan):
    c = Cluster(plan)
    c.objects["/apis/apps/v1/namespaces/kube-system/deployments/coredns"]["status"] = {"readyReplicas": 0}
    for s in c.objects["/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices"
                       "?labelSelector=kubernetes.io%2Fservice-name%3Dkube-dns"]["items"]:
        for e in s["endpoints"]:
            e["conditions"]["ready"] = False
    assert not_ready(c.checks()) == {
        "CoreDNS": "0/2 replicas ready, 0 ready endpoints behind Service kube-dns",
        "DNS": "not asked: CoreDNS is not ready"}
    assert c.asked == []


def test_a_node_without_its_dns_cache_is_named_and_dns_is_not_asked(plan):
    c = Cluster(plan)
    pods = c.objects["/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dnode-local-dns"]["items"]
    pods[-1]["status"]["phase"] = "Pending"
    assert not_ready(c.checks()) == {"node-local-dns": f"no ready pod on {c.names[-1]}",
                                     "DNS": "not asked: node-local-dns is not ready"}
    assert c.asked == []


def test_coredns_scaled_to_nothing_and_coredns_missing_are_named(plan):
    c = Cluster(plan)
    c.objects["/apis/apps/v1/namespaces/kube-system/deployments/coredns"]["spec"]["replicas"] = 0
    assert not_ready(c.checks())["CoreDNS"] == "scaled to 0 replicas"
    del c.objects["/apis/apps/v1/namespaces/kube-system/deployments/coredns"]
    assert not_ready(c.checks())["CoreDNS"] == "no Deployment yet"


def test_a_wrong_or_missing_dns_answer_names_the_node_and_what_it_got(plan):
    c = Cluster(plan)
    first, second = c.onprem[:2]
    c.answers[first] = (1, "no answer (PermissionError: Operation not permitted)\n")
    c.answers[second] = (0, "10.99.0.1\n")
    detail = not_ready(c.checks())["DNS"]
    assert detail == (f"kubernetes.default.svc.cluster.local at {plan.node_dns_ip}: "
                      f"{first}: no answer (PermissionError: Operation not permitted); {second}: 10.99.0.1")


def test_a_stale_or_missing_lease_names_the_component(plan):
    c = Cluster(plan)
    c.objects["/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"]["spec"]["renewTime"] = \
        stamp(95)
    del c.objects["/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager"]
    assert not_ready(c.checks()) == {
        "kube-controller-manager": "no leader yet",
        "kube-scheduler": "leader api-1 last renewed its lease 95 s ago (lease: 15 s)"}


def test_a_node_not_ready_is_named_and_only_ready_nodes_are_asked(plan):
    c = Cluster(plan)
    down = c.names[-1]
    c.objects["/api/v1/nodes"]["items"][-1]["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    c.objects["/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dkube-proxy"]["items"].pop()
    assert not_ready(c.checks()) == {"nodes": f"NotReady: {down}"}
    assert down not in {h for h, _ in c.asked}
    c.objects["/api/v1/nodes"]["items"].pop()
    assert not_ready(c.checks()) == {"nodes": f"not registered: {down}"}


def test_an_api_server_not_ready_is_named(plan):
    """An API server is a Node like any other: without its pod network kubelet reports it NotReady."""
    c = Cluster(plan)
    api = plan.members_of("apiserver")[0].name
    node = next(n for n in c.objects["/api/v1/nodes"]["items"] if n["metadata"]["name"] == api)
    node["status"]["conditions"] = [{"type": "Ready", "status": "False",
                                     "message": "container runtime network not ready: cni plugin not initialized"}]
    assert not_ready(c.checks()) == {"nodes": f"NotReady: {api}"}
    assert c.asked and api not in {h for h, _ in c.asked}


def test_kube_proxy_missing_on_a_node_or_rolling_out_is_named(plan):
    c = Cluster(plan)
    pods = c.objects["/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dkube-proxy"]["items"]
    pods[0]["status"]["conditions"] = []
    assert not_ready(c.checks())["kube-proxy"] == f"no ready pod on {c.names[0]}"
    ds = c.objects["/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy"]
    ds["metadata"]["generation"] = 3
    assert not_ready(c.checks())["kube-proxy"].startswith("rolling out")


def test_an_api_server_down_or_lost_part_way_is_one_check_not_an_exception(plan):
    c = Cluster(plan)
    c.down = True
    found = health.checks(plan, c.get, c.run_on)
    assert [(x.name, x.ready) for x in found] == [("kube-apiserver", False)]
    c.down, c.fail_after, c.calls = False, 3, []  # /readyz and the two leases answer, then nothing
    found = health.checks(plan, c.get, c.run_on)
    assert found[-1].name == "kube-apiserver" and not found[-1].ready and "GET /api/v1/nodes" in found[-1].detail


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_wait_says_each_change_once_and_returns_when_ready():
    steps = [[health.Check("CoreDNS", False, "0/2 replicas ready")]] * 3 + [
        [health.Check("CoreDNS", False, "1/2 replicas ready")], [health.Check("CoreDNS", True, "2/2")]]
    said, clock = [], Clock()
    found = health.wait(lambda: steps.pop(0), 60, interval_s=3, say=said.append, clock=clock, sleep=clock.sleep)
    assert found[0].ready and clock.now == 12
    assert said == ["waiting: CoreDNS: 0/2 replicas ready", "waiting: CoreDNS: 1/2 replicas ready"]


def test_wait_gives_up_naming_what_is_not_ready():
    clock = Clock()
    stuck = [health.Check("nodes", True, "3/3 Ready"), health.Check("CoreDNS", False, "scaled to 0 replicas")]
    with pytest.raises(health.NotReady) as info:
        health.wait(lambda: stuck, 30, interval_s=3, say=lambda _m: None, clock=clock, sleep=clock.sleep)
    assert str(info.value) == "not ready after 30 s: CoreDNS: scaled to 0 replicas"
    assert info.value.checks == stuck and 27 <= clock.now <= 30


def test_the_api_client_reads_json_and_the_servers_clock_over_verified_tls(ca, tmp_path):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path == "/api/v1/nodes"
            self.send_response_only(200 if found else 404)
            self.send_header("Date", "Wed, 02 Dec 2026 08:00:00 GMT")
            self.end_headers()
            self.wfile.write(json.dumps({"items": []}).encode() if found else b"not found")

        def log_message(self, *args) -> None:
            pass

    with https_server(ca, tmp_path, Handler) as endpoint:
        with readiness.api(endpoint, ca.cert_pem, admin_kubeconfig(ca, endpoint)) as get:
            assert get("/api/v1/nodes") == ({"items": []}, NOW)
            with pytest.raises(health.ApiError) as info:
                get("/api/v1/nope")
            assert info.value.status == 404
        with readiness.api(endpoint, ca.cert_pem, None) as get, pytest.raises(health.ApiError) as info:
            get("/api/v1/nodes")  # no client certificate: the server refuses the handshake
        assert info.value.status == 0


def test_the_query_a_node_runs_reads_an_answer_and_reports_no_answer(plan, tmp_path):
    """The node-side script against a UDP server on a loopback address (port 53: needs root, as the lab)."""
    server_ip = "127.53.0.10"
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind((server_ip, 53))
    except PermissionError:
        pytest.skip("binding port 53 needs root")
    sock.settimeout(10)

    def answer() -> None:
        q, addr = sock.recvfrom(512)
        header = q[:2] + struct.pack(">HHHHH", 0x8180, 1, 1, 0, 0)
        rr = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 30, 4) + socket.inet_aton(plan.api_service_ip)
        sock.sendto(header + q[12:] + rr, addr)

    threading.Thread(target=answer, daemon=True).start()
    argv = health.dns_query_argv(plan)
    argv[-1] = server_ip
    try:
        proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=30)
        assert (proc.returncode, proc.stdout.strip()) == (0, plan.api_service_ip)
    finally:
        sock.close()
    proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stdout.startswith("no answer ("), proc.stdout


@pytest.mark.parametrize(("raw", "seconds"), [(None, 1200), ("", 1200), ("20", 1200), ("1", 60), ("0.25", 15)])
def test_the_stacks_wait_is_minutes_fractions_allowed(raw, seconds):
    assert readiness.wait_seconds(raw) == seconds


@pytest.mark.parametrize(("raw", "words"), [("soon", "'soon' is not a number of minutes"), ("0", "above 0"),
                                            ("-5", "above 0"), ("inf", "above 0"), ("nan", "above 0")])
def test_a_wait_that_is_not_a_positive_number_is_one_clear_error(raw, words):
    with pytest.raises(ValueError) as exc:
        readiness.wait_seconds(raw)
    assert str(exc.value).startswith("skyrack-cluster:apiserverWaitMinutes: ") and words in str(exc.value)
