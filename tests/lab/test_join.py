"""`skyrack join` against the lab's racks: real Ansible runs, the state asserted on the hosts.

The tests run in file order and share the session's lab: converge twice (second run
changes nothing), dry run, a node lost mid-run and the retry, the API server away during a
join and the retry through Receptor, bad input. Every real run
is followed by another that must report changed=0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from skyrack import plan as planmod
from skyrack.join import node_files
from skyrack.render import cloud_init
from support import ROOT, run_cli

pytestmark = [pytest.mark.lab, pytest.mark.slow]
RACKS = {"r01": ["r01-n01", "r01-n02"], "r02": ["r02-n01"]}
RACK = [h for hosts in RACKS.values() for h in hosts]  # every worker


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def outputs(lab) -> Path:
    """The lab's control-plane outputs: the same contract as the Azure stack's `pulumi stack output`."""
    proc = run_cli("lab", "outputs", str(lab.env))
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


def join(lab, runs: Path, *args: str) -> tuple[int, dict, str]:
    proc = run_cli("join", str(lab.env), "--runs-dir", str(runs), "--json", *args, timeout=900)
    data = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, data, proc.stderr


def hosts(data: dict) -> dict[str, dict]:
    return {h["host"]: h for r in data["racks"] for h in r["hosts"]}


def assert_unchanged(lab, runs: Path, outputs: Path) -> None:
    rc, data, err = join(lab, runs, "--outputs", str(outputs))
    assert rc == 0, err
    assert {h: r["changed"] for h, r in hosts(data).items()} == dict.fromkeys(RACK, 0)


def test_join_converges_then_changes_nothing(lab, runs, outputs):
    rc, data, err = join(lab, runs, "--outputs", str(outputs))
    assert rc == 0, err
    first = hosts(data)
    assert set(first) == set(RACK)
    # the file's rollout (join: parallel 2, no canary): both racks at once
    assert data["parallel"] == 2 and data["canary"] is False
    w = {r["rack"]: (r["started"], r["ended"]) for r in data["racks"]}
    assert w["r01"][0] < w["r02"][1] and w["r02"][0] < w["r01"][1], w
    assert all(h["result"] == "ok" and h["changed"] > 0 for h in first.values()), first
    assert_unchanged(lab, runs, outputs)


def test_hosts_run_what_the_join_configured(lab, outputs):
    p = planmod.make(lab.env)
    for name in RACK:
        # containerd answers on its socket, with systemd cgroups and its root on the data disk
        assert "Server:" in lab.ssh(name, "ctr --address /run/containerd/containerd.sock version")
        assert lab.ssh(name, "systemctl is-active containerd").strip() == "active"
        toml = lab.ssh(name, "cat /etc/containerd/config.toml")
        assert "SystemdCgroup = true" in toml and 'root = "/data/containerd"' in toml
        assert lab.ssh(name, "test -d /data/containerd/io.containerd.content.v1.content && echo yes").strip() == "yes"
        # sysctls in effect where they can apply here ...
        assert lab.ssh(name, "sysctl -n net.ipv4.ip_forward net.core.somaxconn").split() == ["1", "32768"]
        assert lab.ssh(name, "sysctl -n net.bridge.bridge-nf-call-iptables").strip() == "1"
        # ... and the ones that cannot written down as skipped, with the reason
        conf = lab.ssh(name, "cat /etc/sysctl.d/90-skyrack.conf")
        assert "\nnet.core.somaxconn = 32768\n" in conf
        skipped = "# net.ipv4.neigh.default.gc_thresh3 = 100000  # skipped: does not exist in this network namespace"
        assert skipped in conf
        assert lab.ssh(name, "grep -c nofile /etc/security/limits.d/90-skyrack.conf").strip() == "4"
        # files rendered from the plan: byte for byte what the Python side renders
        assert lab.ssh(name, "cat /etc/kubernetes/kubelet.conf.d/50-skyrack.conf") == node_files.kubelet_config(p, name)
        assert lab.ssh(name, "cat /etc/default/kubelet") == node_files.kubelet_flags(p, name)
        kubelet = yaml.safe_load(node_files.kubelet_config(p, name))
        node = next(n for n in p.nodes if n.name == name)
        assert kubelet["serializeImagePulls"] is False
        cni = json.loads(lab.ssh(name, "cat /etc/cni/net.d/10-skyrack.conflist"))
        assert cni["plugins"][0]["ipam"]["ranges"] == [[{"subnet": node.pod_cidr}]]
        # the pod network: the role and the API servers' user-data render one set of templates, byte for byte
        peers = [x for x in p.segment_peers(node.rack) if x["name"] != name]
        for path, mode, text in cloud_init.pod_network_files(p, node=name, where=f"{p.env.name}, rack {node.rack}",
                                                             pod_cidr=node.pod_cidr, peers=peers):
            assert lab.ssh(name, f"cat {path}") == text, path
            assert lab.ssh(name, f"stat -c %a {path}").strip() == mode.lstrip("0"), path
        join_cfg = lab.ssh(name, "cat /etc/kubernetes/skyrack-join.yaml")
        assert join_cfg == node_files.join_configuration(p, name, json.loads(outputs.read_text()))
        assert lab.ssh(name, "stat -c %a /etc/kubernetes/skyrack-join.yaml").strip() == "600"


def test_the_summary_reports_what_was_skipped_and_why(lab, runs):
    record = sorted(runs.glob("*-lab-r01"))[-1] / "summary.json"
    summary = json.loads(record.read_text())
    for h in summary["hosts"]:
        report = {r["item"]: r for r in h["report"]}
        gc = report["sysctl net.ipv4.neigh.default.gc_thresh1=80000"]
        assert gc["status"] == "skipped" and "network namespace" in gc["reason"]
        assert report["sysctl vm.max_map_count=262144"]["status"] == "skipped"
        assert report["sysctl net.core.somaxconn=32768"]["status"] == "unchanged"
        assert report["NVIDIA stack"]["status"] == "skipped"
        assert report["NVIDIA stack"]["reason"].startswith("no NVIDIA GPU detected (lspci: 0")
        assert report["kubelet and kubeadm packages"]["status"] == "applied"
        assert report["kubeadm join"]["status"] == "unchanged"  # the newest record: the second run
        assert report["kernel module overlay"]["status"] == "present"


def test_the_bootstrap_token_never_reaches_a_file(runs, outputs):
    token = json.loads(outputs.read_text())["bootstrap_token"]
    leaked = [p for p in runs.rglob("*") if p.is_file() and token in p.read_text(errors="replace")]
    assert leaked == []


def test_check_mode_changes_nothing(lab, runs):
    lab.ssh("r01-n01", "rm /etc/security/limits.d/90-skyrack.conf; sysctl -qw net.core.somaxconn=4096")
    rc, data, err = join(lab, runs, "--check")
    assert rc == 0, err
    result = hosts(data)
    assert result["r01-n01"]["changed"] >= 2  # it would restore the file and the sysctl
    assert lab.ssh("r01-n01", "test -e /etc/security/limits.d/90-skyrack.conf || echo absent").strip() == "absent"
    assert lab.ssh("r01-n01", "sysctl -n net.core.somaxconn").strip() == "4096"


def test_a_node_lost_mid_run_fails_alone_and_the_retry_converges(lab, runs, outputs):
    # The drift from the check-mode test is still on r01-n01: this run repairs it while r02's one host is
    # lost. (Ansible's max_fail_percentage counts failed hosts, not unreachable ones: a lost host whose
    # rack has peers fails alone or stops them depending on which task it was lost in; a rack of one
    # makes the outcome one.)
    cmd = [sys.executable, "-m", "skyrack", "join", str(lab.env), "--runs-dir", str(runs), "--json",
           "--outputs", str(outputs)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "modules")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until the run is under way on the hosts
        events = list(runs.glob("*-lab-r02*/artifacts/ansible/job_events/*.json"))
        newest = max((p.parent.parent.parent.parent for p in events), key=lambda d: d.name, default=None)
        if newest and not (newest / "summary.json").exists() and \
                len(list((newest / "artifacts/ansible/job_events").glob("*.json"))) > 20:
            break
        time.sleep(0.5)
    try:
        assert run_cli("lab", "stop", "r02-n01", str(lab.env)).returncode == 0
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 1, err
        result = hosts(json.loads(out))
        assert result["r02-n01"]["result"] in ("unreachable", "failed"), result["r02-n01"]
        assert result["r02-n01"]["message"], result["r02-n01"]
        # r01 was running beside it and finished (running racks are not stopped)
        assert [result[h]["result"] for h in RACKS["r01"]] == ["ok", "ok"], result
        assert lab.ssh("r01-n01", "sysctl -n net.core.somaxconn").strip() == "32768"  # the drift repaired
        # while it is away, a run of it alone names it (the plain output; a relative --runs-dir, as
        # `./dev lab` uses: ansible-runner itself works from another directory)
        proc2 = run_cli("join", str(lab.env), "--runs-dir", runs.name, "--limit", "r02-n01", cwd=runs.parent,
                        timeout=300)
        assert proc2.returncode == 1 and "r02-n01: unreachable" in proc2.stdout, proc2.stdout + proc2.stderr
    finally:
        assert run_cli("lab", "up", str(lab.env), timeout=600).returncode == 0
    rc, data, err = join(lab, runs, "--retry-failed", "--outputs", str(outputs))
    assert rc == 0, err
    assert list(hosts(data)) == ["r02-n01"]
    assert_unchanged(lab, runs, outputs)
    rc, data, err = join(lab, runs, "--retry-failed")
    assert rc == 0 and data["racks"] == [], err


def test_the_api_server_down_during_a_join_fails_that_host_and_the_retry_through_receptor_joins_it(
        lab, runs, outputs):
    """One API server lost is no outage: the load balancer's endpoint keeps answering through the other.
    A node that must (re)join while the whole control plane is away: a clear failure; then --retry-failed
    through Receptor (execution node x02 serves r02) joins it again with the control plane's outputs: the
    bootstrap token reached the worker, and it is in no file of any record."""
    assert run_cli("lab", "kubectl", "--env", str(lab.env), "delete", "node", "r02-n01").returncode == 0
    lab.ssh("r02-n01", "kubeadm reset --force >/dev/null 2>&1")
    first, *others = [m.name for m in planmod.make(lab.env).members_of("apiserver")]
    assert run_cli("lab", "stop", first, str(lab.env)).returncode == 0
    try:
        # With more than one member (configs/lab.yaml may run two: docs/lab.md), once the balancer's probe
        # has taken the member out (as Azure's would, 2 failed probes 5 s apart),
        # every request through the endpoint is answered by the other: round robin would otherwise send
        # every other one to the stopped member. (In the probe's window, as in Azure, a request may fail.)
        log = lab.paths.log_dir / "balancer.log"
        deadline = time.monotonic() + 60
        while others and f"{first} is DOWN" not in log.read_text():
            assert time.monotonic() < deadline, f"the balancer never took {first} out: {log.read_text()[-2000:]}"
            time.sleep(2)
        for _ in range(8 if others else 0):
            proc = run_cli("lab", "kubectl", "--env", str(lab.env), "get", "--raw", "/readyz", timeout=60)
            assert (proc.returncode, proc.stdout.strip()) == (0, "ok"), proc.stderr
        for name in others:
            assert run_cli("lab", "stop", name, str(lab.env)).returncode == 0
        rc, data, err = join(lab, runs, "--limit", "r02-n01", "--outputs", str(outputs))
        assert rc == 1, err
        result = hosts(data)["r02-n01"]
        assert result["result"] == "failed", result
        assert "kubeadm join failed" in err, err  # the progress lines on stderr say why
    finally:
        assert run_cli("lab", "up", str(lab.env), timeout=900).returncode == 0
    rc, data, err = join(lab, runs, "--retry-failed", "--via", "receptor", "--outputs", str(outputs))
    assert rc == 0, err
    (run,) = data["racks"]
    assert run["via"] == "receptor:x02" and [h["host"] for h in run["hosts"]] == ["r02-n01"], run
    assert run["hosts"][0]["result"] == "ok", run
    report = {r["item"]: r["status"] for r in json.loads((Path(run["record"]) / "summary.json").read_text())
              ["hosts"][0]["report"]}
    assert report["kubeadm join"] == "applied", report
    rc, data, err = join(lab, runs, "--via", "receptor", "--rack", "r02", "--outputs", str(outputs))
    assert rc == 0 and data["racks"][0]["hosts"][0]["changed"] == 0, (err, data)
    lab.ready()
    test_the_bootstrap_token_never_reaches_a_file(runs, outputs)
    assert (Path(run["record"]) / "env" / "extravars").exists()  # the record keeps what is not secret
    # nothing of the run is left on the execution node (the worker unpacked it into memory and removed it)
    assert lab.ssh("x02", "ls /dev/shm | grep -c skyrack- || true").strip() == "0"


@pytest.mark.parametrize(("args", "message"), [
    (["--rack", "r99"], "no rack named 'r99' (racks: r01, r02)"),
    (["--limit", "r01-n01,r07-n01"], "--limit names hosts not in lab: r07-n01"),
])
def test_bad_selection_is_refused(lab, runs, args, message):
    proc = run_cli("join", str(lab.env), "--runs-dir", str(runs), *args)
    assert proc.returncode == 1
    assert message in proc.stderr and "Traceback" not in proc.stderr
