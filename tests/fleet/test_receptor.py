"""`skyrack join --via receptor`: each rack's run on its execution node (ansible-runner transmit -> Receptor ->
worker -> process), events back into the same summary and records; a lost execution node fails its rack.

The execution nodes are the fleet lab's own (x01, x02: lab nodes booted with skyrack's execution-node
user-data), their runs reach the racks over SSH from their own addresses.

Every real run is followed by one that must report changed=0.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import ROOT, run_cli

from .conftest import RACKS, join, wait_routed, with_execution

pytestmark = [pytest.mark.lab, pytest.mark.slow]
SERVES = {"x01": ["r01", "r02"], "x02": ["r03"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs-receptor")


@pytest.fixture(scope="module")
def rlab(fleet_lab, tmp_path_factory):
    for name in SERVES:
        wait_routed(name)
    env = with_execution(fleet_lab, tmp_path_factory.mktemp("env-receptor"), SERVES)
    return dataclasses.replace(fleet_lab, env=env)


def assert_unchanged(rlab, runs: Path) -> dict:
    rc, data, err = join(rlab, runs, "--via", "receptor", "--parallel", "2", "--canary")
    assert rc == 0, err
    assert {h["host"]: h["changed"] for r in data["racks"] for h in r["hosts"]} == \
        {h: 0 for hosts in RACKS.values() for h in hosts}
    return data


def test_racks_run_on_their_execution_nodes_in_parallel(rlab, runs):
    # a change for every host, so the run through receptor is shown to apply it (the local tests converged them)
    for hosts in RACKS.values():
        rlab.ssh(hosts[0], "rm -f /etc/security/limits.d/90-skyrack.conf")
    rc, data, err = join(rlab, runs, "--via", "receptor", "--parallel", "2", "--canary")
    assert rc == 0, err
    by_rack = {r["rack"]: r for r in data["racks"]}
    assert {r: by_rack[r]["via"] for r in RACKS} == {"r01": "receptor:x01", "r02": "receptor:x01",
                                                     "r03": "receptor:x02"}
    assert all(h["result"] == "ok" and h["changed"] >= 1 for r in data["racks"] for h in r["hosts"]), data
    w = {r: (by_rack[r]["started"], by_rack[r]["ended"]) for r in RACKS}
    assert w["r01"][1] <= min(w["r02"][0], w["r03"][0])  # the canary first, alone
    assert w["r02"][0] < w["r03"][1] and w["r03"][0] < w["r02"][1], w  # then both at once
    for r in data["racks"]:  # the worker's events and report, back in the record
        record = Path(r["record"])
        assert len(list((record / "artifacts/ansible/job_events").glob("*.json"))) > 30
        assert json.loads((record / "summary.json").read_text())["hosts"][0]["report"], r["rack"]
    for hosts in RACKS.values():
        assert rlab.ssh(hosts[0], "grep -c nofile /etc/security/limits.d/90-skyrack.conf").strip() == "4"
    # the runs reached the racks from the execution nodes' own addresses, not from the lab host
    ips = {h["name"]: h["ip"] for h in rlab.status()["hosts"]}
    for rack, node in (("r01", "x01"), ("r03", "x02")):
        log = rlab.ssh(RACKS[rack][0], "journalctl -q --no-pager -u ssh.service")
        assert f"Accepted publickey for root from {ips[node]} " in log, (rack, node)
    assert_unchanged(rlab, runs)


def test_a_lost_execution_node_fails_its_rack_and_the_retry_converges(rlab, fleet_lab, runs):
    rlab.ssh("r03-n01", "rm -f /etc/security/limits.d/90-skyrack.conf")
    cmd = [sys.executable, "-m", "skyrack", "join", str(rlab.env), "--runs-dir", str(runs), "--json",
           "--via", "receptor", "--rack", "r03"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "modules")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the worker's events are streaming back
        newest = max(runs.glob("*-lab-r03*"), key=lambda d: d.name)
        if not (newest / "summary.json").exists() and \
                len(list((newest / "artifacts/ansible/job_events").glob("*.json"))) > 10:
            break
        time.sleep(0.3)
    assert run_cli("lab", "stop", "x02", str(fleet_lab.env)).returncode == 0  # the machine goes away
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        assert run_cli("lab", "up", str(fleet_lab.env), timeout=600).returncode == 0
        wait_routed("x02")
    assert proc.returncode == 1, err
    data = json.loads(out)
    host = data["racks"][0]["hosts"][0]
    assert host["result"] == "not run" and "execution node x02 left the Receptor mesh" in host["message"], host
    rc, data, err = join(rlab, runs, "--via", "receptor", "--retry-failed")
    assert rc == 0, err
    assert [h["host"] for r in data["racks"] for h in r["hosts"]] == ["r03-n01"]
    assert rlab.ssh("r03-n01", "grep -c nofile /etc/security/limits.d/90-skyrack.conf").strip() == "4"
    assert_unchanged(rlab, runs)


def test_an_unknown_execution_node_is_refused_before_any_rack_starts(rlab, runs, tmp_path):
    env = with_execution(rlab, tmp_path / "unknown", {"x01": ["r01", "r02"], "x09": ["r03"]})
    proc = run_cli("join", str(env), "--runs-dir", str(tmp_path / "runs"), "--via", "receptor")
    assert proc.returncode == 1
    assert f"{env}: execution.nodes[1].name: execution node 'x09' is not reachable through Receptor " \
           "(reachable: controller, x01, x02)" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists()


def test_an_unreachable_receptor_is_refused_before_any_rack_starts(rlab, tmp_path):
    env = with_execution(rlab, tmp_path / "nosocket", SERVES, socket=tmp_path / "absent.sock")
    proc = run_cli("join", str(env), "--runs-dir", str(tmp_path / "runs"), "--via", "receptor")
    assert proc.returncode == 1
    assert f"{env}: execution.receptor_socket: Receptor does not answer on {tmp_path / 'absent.sock'}" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists()


def test_racks_no_execution_node_serves_are_refused(rlab, tmp_path):
    env = with_execution(rlab, tmp_path / "unserved", {"x01": ["r01"]})
    proc = run_cli("join", str(env), "--runs-dir", str(tmp_path / "runs"), "--via", "receptor")
    assert proc.returncode == 1
    assert f"{env}: execution.nodes: no execution node serves rack(s) r02, r03" in proc.stderr, proc.stderr
