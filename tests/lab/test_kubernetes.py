"""The lab's Kubernetes after the rack joined (tests/lab/test_join.py runs first): a real cluster.

Every node Ready with the plan's labels and taints; CoreDNS answers for the cluster's own names, and the
cluster is not called ready while it does not;
a pod on each worker gets an address from that node's planned range and reaches a pod on another
worker and the API server's ClusterIP. The pods run upstream's own e2e image (agnhost), built
with the rest of Kubernetes.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import subprocess
import sys
import time

import pytest

from skyrack import plan as planmod
from skyrack.kube import bootstrap, health, isolation, monitoring
from support import ROOT, run_cli

pytestmark = [pytest.mark.lab, pytest.mark.slow]
NAMESPACE = "skyrack-e2e"
CLI = [sys.executable, "-m", "skyrack"]


def kubectl(lab, *args: str, stdin: str | None = None, check: bool = True) -> str:
    """`skyrack lab kubectl`: the lab's own kubectl with its admin kubeconfig."""
    proc = subprocess.run([*CLI, "lab", "kubectl", "--env", str(lab.env), *args], input=stdin, capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "modules")})
    if check:
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def cluster(lab):
    lab.ready()
    return {"nodes": lab.nodes()}


def test_every_worker_is_ready_with_the_plans_labels_and_taints(lab, cluster):
    p = planmod.make(lab.env)
    nodes = {n["name"]: n for n in cluster["nodes"]}
    # the API servers too: their user-data gives them the racks' pod network on their range from the lock
    for member in p.members_of("apiserver"):
        assert nodes[member.name]["ready"], nodes[member.name]
        assert member.pod_cidr == planmod.read_lock(lab.env)["apiservers"][member.name]
    for want in p.nodes:
        got = nodes[want.name]
        assert got["ready"], got
        assert got["version"] == f"v{p.env.kubernetes.version}"
        assert got["labels"] == {k: v for k, v in want.labels.items() if k.startswith("skyrack.io/")}
        assert sorted(got["taints"]) == sorted(want.taints)


def test_coredns_answers_for_the_cluster(lab, cluster):
    """From every worker, through its DNS cache (every kubelet's clusterDNS), kube-dns and kube-proxy."""
    p = planmod.make(lab.env)
    api = str(ipaddress.IPv4Network(p.env.kubernetes.service_cidr)[1])
    for node in p.nodes:
        assert lab.ssh(node.name, shlex.join(health.dns_query_argv(p))).strip() == api, node.name


def test_the_cluster_is_not_ready_while_coredns_is_stopped_and_the_wait_names_it(lab, cluster):
    """`skyrack lab ready` (what ./dev lab and these tests wait on) with CoreDNS scaled to nothing: not
    ready, naming CoreDNS; scaled back to the plan's count, ready again, DNS answering from every node."""
    replicas = bootstrap.coredns_replicas(planmod.make(lab.env))
    kubectl(lab, "-n", "kube-system", "scale", "deployment/coredns", "--replicas=0")
    try:
        kubectl(lab, "-n", "kube-system", "wait", "--for=delete", "pod", "-l", "k8s-app=kube-dns", "--timeout=120s")
        proc = run_cli("lab", "ready", str(lab.env), "--wait", "10", timeout=120)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "not ready after 10 s: CoreDNS: scaled to 0 replicas" in proc.stderr, proc.stderr
        assert "lab waiting: CoreDNS: scaled to 0 replicas" in proc.stderr, proc.stderr  # said while it waited
        assert "DNS: not asked: CoreDNS is not ready" in proc.stderr, proc.stderr
        proc = run_cli("lab", "ready", str(lab.env), "--json", timeout=120)
        assert proc.returncode == 1
        checks = {c["name"]: c["ready"] for c in json.loads(proc.stdout)["checks"]}
        # the verdict is about CoreDNS (and the lookups it answers) alone
        assert checks == {"kube-apiserver": True, "kube-controller-manager": True, "kube-scheduler": True,
                          "nodes": True, "kube-proxy": True, "CoreDNS": False, "node-local-dns": True,
                          "DNS": False}, checks
    finally:
        kubectl(lab, "-n", "kube-system", "scale", "deployment/coredns", f"--replicas={replicas}")
    checks = {c["name"]: c for c in lab.ready()}
    assert checks["CoreDNS"]["ready"] and checks["DNS"]["ready"], checks
    assert f"{replicas}/{replicas} replicas ready" in checks["CoreDNS"]["detail"]


def probe_namespace(lab) -> None:
    """The operator's probe namespace: its pods tolerate every taint to reach every node, so it is one of
    the cluster's service namespaces, outside the team policies (skyrack.kube.isolation)."""
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": NAMESPACE, "labels": isolation.cluster_service_labels()}}
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps(ns))


def test_pods_get_planned_addresses_and_reach_each_other_and_the_api_server(lab, cluster):
    p = planmod.make(lab.env)
    probe_namespace(lab)
    api = p.members_of("apiserver")[0]  # a Node with a pod range like any other (its own, from the lock)
    for node in [*p.nodes, api]:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"net-{node.name}", "namespace": NAMESPACE},
               "spec": {"nodeName": node.name, "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "netexec", "image": lab.image("agnhost"), "args": ["netexec", "--http-port=8080"]}]}}
        kubectl(lab, "apply", "-f", "-", stdin=json.dumps(pod))
    kubectl(lab, "-n", NAMESPACE, "wait", "--for=condition=Ready", "pod", "--all", "--timeout=240s")
    pods = json.loads(kubectl(lab, "-n", NAMESPACE, "get", "pods", "-o", "json"))["items"]
    ips = {item["spec"]["nodeName"]: item["status"]["podIP"] for item in pods}
    for node in [*p.nodes, api]:
        assert ipaddress.IPv4Address(ips[node.name]) in ipaddress.IPv4Network(node.pod_cidr), (node.name, ips)
    names = [n.name for n in p.nodes]
    api_clusterip = str(ipaddress.IPv4Network(p.env.kubernetes.service_cidr)[1])
    for i, name in enumerate(names):
        peer = names[(i + 1) % len(names)]
        # agnhost connect exits 0 once the TCP connection is made (kubectl fails the test otherwise):
        # pod -> pod on another worker, through the routes the pod_network role set ...
        kubectl(lab, "-n", NAMESPACE, "exec", f"net-{name}", "--", "/agnhost", "connect", f"{ips[peer]}:8080",
                "--timeout=5s")
        # ... and pod -> the API server's ClusterIP, through kube-proxy
        kubectl(lab, "-n", NAMESPACE, "exec", f"net-{name}", "--", "/agnhost", "connect", f"{api_clusterip}:443",
                "--timeout=5s")
    # from the API server's own pod range too
    kubectl(lab, "-n", NAMESPACE, "exec", f"net-{api.name}", "--", "/agnhost", "connect", f"{api_clusterip}:443",
            "--timeout=5s")
    # between the racks' pods and the API server's, both ways, and from the API server itself to each rack's pod
    # (an admission webhook, an aggregated API): what the site and Azure route in production, the lab's stand-in
    # for them here (skyrack.lab.network.fabric_routes; the conformance suite's webhook test found it missing)
    for name in names:
        kubectl(lab, "-n", NAMESPACE, "exec", f"net-{api.name}", "--", "/agnhost", "connect", f"{ips[name]}:8080",
                "--timeout=5s")
        kubectl(lab, "-n", NAMESPACE, "exec", f"net-{name}", "--", "/agnhost", "connect", f"{ips[api.name]}:8080",
                "--timeout=5s")
        assert lab.ssh(api.name, f"curl -sS -m 5 -o /dev/null -w '%{{http_code}}' http://{ips[name]}:8080/hostname") \
            == "200", name


def test_packages_came_from_the_lab_repository_at_the_pinned_version_and_are_held(lab, cluster):
    """Kubernetes and containerd on a rack node (the roles) and an API server (its user-data), etcd on an etcd
    member (its user-data): each from mirrors.kubernetes at the environment's version, held there."""
    p = planmod.make(lab.env)
    k, containerd, etcd = p.env.kubernetes.version, p.env.kubernetes.containerd, p.env.control_plane.etcd.version
    wanted = {"r01-n01": {"kubelet": k, "kubeadm": k, "containerd": containerd},
              "apiserver-0": {"kubelet": k, "kubeadm": k, "kubectl": k, "containerd": containerd},
              "etcd-0": {"etcd-server": etcd, "etcd-client": etcd}}
    for host, packages in wanted.items():
        held = set(lab.ssh(host, "apt-mark showhold").split())
        for name, version in packages.items():
            assert lab.ssh(host, f"dpkg-query -W -f '${{Version}}' {name}").strip() == f"{version}-1.1", (host, name)
            policy = lab.ssh(host, f"apt-cache policy {name}")
            assert p.env.mirrors.kubernetes.rstrip("/") in policy, policy  # installed from mirrors.kubernetes
            assert name in held, (host, name, held)
    for binary, args in (("kubelet", "--version"), ("kubeadm", "version -o short"), ("kubectl", "version --client")):
        assert f"v{k}" in lab.ssh("r01-n01", f"{binary} {args}")
    assert f"etcd Version: {etcd}" in lab.ssh("etcd-0", "etcd --version")
    runtimes = {n["name"]: n["runtime"] for n in cluster["nodes"]}
    assert set(runtimes.values()) == {f"containerd://{containerd}"}, runtimes


def test_containerd_reads_the_configuration_skyrack_wrote(lab, cluster):
    """containerd's own view of its configuration (`containerd config dump`), not the file's text: the keys
    the template sets are the ones containerd 2 applies."""
    p = planmod.make(lab.env)
    for host in ("r01-n01", "apiserver-0"):
        dump = lab.ssh(host, "containerd config dump 2>/dev/null")
        assert f"sandbox = '{p.env.cluster.versions.pause}'" in dump, host
        assert "SystemdCgroup = true" in dump and "config_path = '/etc/containerd/certs.d'" in dump, host
        assert "bin_dirs = ['/usr/lib/cni']" in dump and "max_concurrent_downloads = 10" in dump, host


def test_every_built_image_pulls_through_the_registry_mirror(lab, cluster):
    """containerd on a worker pulls each image by its upstream name; hosts.toml sends it to mirrors.registry."""
    from skyrack import upstream

    p = planmod.make(lab.env)
    hosts = lab.ssh("r01-n01", "cat /etc/containerd/certs.d/registry.k8s.io/hosts.toml")
    assert f'[host."{p.env.mirrors.registry}/v2/registry.k8s.io"]' in hosts
    for ref in upstream.KUBERNETES_BUILDS[p.env.kubernetes.version].images().values():
        lab.ssh("r01-n01", f"ctr -n k8s.io images pull --hosts-dir /etc/containerd/certs.d {ref} >/dev/null")
        assert ref in lab.ssh("r01-n01", f"ctr -n k8s.io images ls -q name=={ref}")


def test_prometheus_runs_and_every_target_it_finds_is_up(lab, cluster):
    """The cluster layer's monitoring on the image the lab builds from Prometheus' module: Running, and
    scraping the API server, every Node's kubelet and cAdvisor (through the API server's node proxy) and the
    annotated pods (CoreDNS, every node's DNS cache), each target up.

    Its API is read from the node it runs on: in the lab the API servers have no route to pod addresses (in
    Azure the VNet sends the on-prem pod ranges over the VPN), so the API server's service proxy cannot
    reach it here."""
    kubectl(lab, "-n", monitoring.NAMESPACE, "rollout", "status", "deployment/prometheus", "--timeout=300s")
    (prom,) = [p for p in json.loads(kubectl(lab, "-n", monitoring.NAMESPACE, "get", "pods", "-l",
                                             "app.kubernetes.io/name=prometheus", "-o", "json"))["items"]
               if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    url = f"http://{prom['status']['podIP']}:9090/api/v1/targets"
    fetch = f"python3 -c {shlex.quote(f'import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).read().decode())')}"
    nodes = {n["name"] for n in cluster["nodes"]}
    pods = json.loads(kubectl(lab, "get", "pods", "-A", "-o", "json"))["items"]
    annotated = {p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"
                 and p["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true"}
    assert len(annotated) > len(nodes), annotated  # a DNS cache on every node, and CoreDNS
    deadline, seen = time.monotonic() + 240, {}
    while time.monotonic() < deadline:  # every target is scraped within a scrape interval (30 s) of being found
        targets = json.loads(lab.ssh(prom["spec"]["nodeName"], fetch))["data"]["activeTargets"]
        seen = {}
        for t in targets:
            # a node's targets carry its labels (labelmap: kubernetes_io_hostname), a pod's its name
            key = (t["labels"]["job"], t["labels"].get("kubernetes_io_hostname") or t["labels"].get("pod")
                   or t["labels"]["instance"])
            seen[key] = (t["health"], t.get("lastError", ""))
        if seen and all(h == "up" for h, _ in seen.values()) and \
                {n for job, n in seen if job == "kubernetes-pods"} >= annotated:
            break
        time.sleep(5)
    down = {k: v for k, v in seen.items() if v[0] != "up"}
    assert not down, down
    by_job: dict[str, set] = {}
    for job, who in seen:
        by_job.setdefault(job, set()).add(who)
    assert len(by_job["kubernetes-apiservers"]) == len(planmod.make(lab.env).members_of("apiserver")), by_job
    assert by_job["kubernetes-nodes"] == nodes, by_job  # every Node's kubelet, the control plane's too
    assert by_job["kubernetes-cadvisor"] == nodes, by_job
    assert by_job["kubernetes-pods"] >= annotated, by_job


def _kib(q: str) -> int:
    units = {"Ki": 1, "Mi": 1024, "Gi": 1024 ** 2}
    return int(q[:-2]) * units[q[-2:]] if q[-2:] in units else int(q) // 1024


def _cmdline(lab, host: str, program: str) -> list[str]:
    """The arguments of the running `program` on `host`, from /proc (the lab's base image has no procps; a
    process's comm is its name cut to 15 characters)."""
    script = (f"for d in /proc/[0-9]*; do [ \"$(cat $d/comm 2>/dev/null)\" = {program[:15]} ] && "
              "{ tr '\\0' '\\n' < $d/cmdline; exit 0; }; done; exit 1")
    return lab.ssh(host, script).split()


def test_the_control_plane_and_every_kubelet_run_the_plans_load_settings(lab, cluster):
    """skyrack.tuning's settings are what runs, not only what was written: the API server's and the controller
    manager's own command lines, every kubelet's allocatable (its capacity less the plan's reservations for the
    node's size, API server included), and an audit log that records a Secret being read, without the Secret."""
    p = planmod.make(lab.env)
    for host in [m.name for m in p.members_of("apiserver")]:
        api = _cmdline(lab, host, "kube-apiserver")
        assert {f"--{k}={v}" for k, v in p.tuning.apiserver_args()} <= set(api), api
        cm = _cmdline(lab, host, "kube-controller-manager")
        assert {f"--{k}={v}" for k, v in p.tuning.controller_manager_args()} <= set(cm), cm
    reservations = {**{n.name: n.reservation for n in p.nodes}, **{m.name: m.reservation for m in p.members_of("apiserver")}}
    assert all(reservations.values()), "the lab declares every rack's hardware: this test would prove nothing"
    for name, r in reservations.items():
        status = json.loads(kubectl(lab, "get", "node", name, "-o", "json"))["status"]
        cap, alloc = status["capacity"], status["allocatable"]
        assert int(cap["cpu"]) * 1000 - int(alloc["cpu"].removesuffix("m")) == r.kube_cpu_m + r.system_cpu_m, (name, alloc)
        assert _kib(cap["memory"]) - _kib(alloc["memory"]) == \
            (r.kube_memory_mi + r.system_memory_mi + r.eviction_memory_mi) * 1024, (name, cap, alloc)
    secret, value = "skyrack-audit-probe", f"never-logged-{os.getpid()}"
    kubectl(lab, "create", "secret", "generic", secret, "-n", "default", f"--from-literal=v={value}")
    try:
        kubectl(lab, "get", "secret", secret, "-n", "default", "-o", "name")
        # each API server logs what it served; the load balancer chose which one served each request
        hosts = [m.name for m in p.members_of("apiserver")]
        deadline, log = time.monotonic() + 60, ""
        while time.monotonic() < deadline and not ('"verb":"get"' in log and '"verb":"create"' in log):
            log = "".join(lab.ssh(h, f"grep -h '\"name\":\"{secret}\"' /var/log/kubernetes/audit/audit.log || true")
                          for h in hosts)  # the log is written in batches
            time.sleep(2)
        events = [json.loads(line) for line in log.splitlines()]
        assert {e["verb"] for e in events} >= {"create", "get"}, log
        assert all(e["level"] == "Metadata" and "requestObject" not in e for e in events), log
        assert value not in log
    finally:
        kubectl(lab, "delete", "secret", secret, "-n", "default", "--ignore-not-found")


def test_an_init_that_did_not_finish_succeeds_when_the_bootstrap_runs_again(lab, cluster):
    """The documented repair of a failed first boot (run skyrack-kubeadm again) on an API server whose init did
    not record its end: the control plane's containers are still up, as after a failed init, so the first
    attempt fails kubeadm's preflight (ports in use); the script kills them and the next attempt succeeds."""
    marker, script = "/var/lib/skyrack/kubeadm-init.done", "/usr/local/sbin/skyrack-kubeadm"
    before = lab.ssh("apiserver-0", "ctr -n k8s.io tasks ls -q | wc -l").strip()
    assert int(before) > 0, "no static pod is running on apiserver-0"
    lab.ssh("apiserver-0", f"rm {marker}")
    proc = subprocess.run(["ssh", "-F", str(lab.paths.ssh_config), "-o", "BatchMode=yes", "apiserver-0",
                           f"{script} 2>&1"], capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:]
    assert "Port-6443" in out or "Port 6443 is in use" in out, out[-3000:]  # the first attempt met the old containers
    # ... and the second one passed (without the kill, every attempt would meet them and the script give up)
    assert out.count("[preflight] Running pre-flight checks") == 2, out[-3000:]
    lab.ssh("apiserver-0", f"test -e {marker}")
    lab.ready()  # the cluster serves again: nodes Ready, the scheduler and controller manager leading, DNS
