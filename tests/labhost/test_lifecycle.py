"""`skyrack lab up|status|down` of small labs of their own, without Kubernetes: refusals, recovery from
a crash (the Receptor mesh included) and a teardown that leaves nothing.

They need no Kubernetes build, so `./dev test` runs them beside it (tests/lab waits for the build).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import lab_variants as variants
from lab.conftest import lab_missing
from skyrack.lab.state import Paths
from support import CONFIGS, need, run_cli

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_status_of_a_lab_that_is_not_up(tmp_path):
    env = variants.make(CONFIGS / "lab.yaml", tmp_path, "skyrackt9", 9)
    proc = run_cli("lab", "status", str(env))
    assert proc.returncode == 1
    assert "down" in proc.stdout


def test_a_non_lab_environment_is_refused(env_copy):
    proc = run_cli("lab", "up", str(env_copy("dev")))
    assert proc.returncode == 1
    assert "not a lab environment" in proc.stderr
    assert "Traceback" not in proc.stderr


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n", 1)[0].lower()
    except (OSError, IndexError):
        return "zombie"  # gone while we read: as good as dead


def test_up_recovers_from_a_crash_and_down_removes_everything(tmp_path):
    """A small lab of its own: kill its processes hard, `up` recovers with disks intact; its environment file gone,
    the test suite's sweep takes it down from its state, leaving nothing."""
    if lab_missing():
        need(str(lab_missing()))
    env = variants.make(CONFIGS / "lab.yaml", tmp_path, "skyrackt1", 3, rack_nodes=1, etcd=1, apiservers=1,
                        kubernetes=False, racks=1)  # and its execution node x01, with the lab's Receptor
    paths = Paths.for_bridge("skyrackt1")
    try:
        assert run_cli("lab", "up", str(env), timeout=600).returncode == 0
        ssh = ["ssh", "-F", str(paths.ssh_config), "-o", "BatchMode=yes", "r01-n01"]
        subprocess.run([*ssh, "echo kept > /root/disk-survives"], check=True, timeout=30)
        st = json.loads(paths.state.read_text())
        for host in st["hosts"].values():  # a crash: everything dies at once, nothing cleans up
            os.killpg(host["pid"], signal.SIGKILL)
        os.kill(st["proxy_pid"], signal.SIGKILL)
        os.killpg(st["receptor_pid"], signal.SIGKILL)
        # gone, as the status will see them: no process left with those IDs (SIGKILL is not instantaneous)
        pids = [h["pid"] for h in st["hosts"].values()] + [st["proxy_pid"], st["receptor_pid"]]
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid) for pid in pids):
            assert time.monotonic() < deadline, "a killed lab process is still running"
            time.sleep(0.2)
        assert run_cli("lab", "status", str(env)).returncode == 1
        proc = run_cli("lab", "up", str(env), timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert subprocess.run([*ssh, "cat /root/disk-survives"], capture_output=True, text=True,
                              timeout=30).stdout.strip() == "kept"
        # the mesh is back: the lab's Receptor runs again and execution node x01 has dialled it
        status = json.loads(run_cli("lab", "status", str(env), "--json").stdout)
        assert status["receptor"] == str(paths.root / "receptor/control.sock"), status
        assert any(h["name"] == "x01" and h["running"] for h in status["hosts"]), status["hosts"]
        from skyrack.join import receptor

        deadline = time.monotonic() + 60
        while "x01" not in (receptor.status(status["receptor"]).get("RoutingTable") or {}):
            assert time.monotonic() < deadline, "x01 did not dial the lab's Receptor again"
            time.sleep(0.5)
        # its environment file goes, as a killed test run's temporary file does: `lab list` still shows the lab,
        # and the sweep `./dev test` runs first (tests/stale_labs.py; here limited to this
        # bridge, since a session-scoped lab of tests/fleet may be up beside it) takes it down from its recorded state alone
        hosts = len(status["hosts"])  # every host of the environment, each running (asserted above for x01)
        assert all(h["running"] for h in status["hosts"]), status["hosts"]
        env.unlink()
        listed = json.loads(run_cli("lab", "list", "--json").stdout)["labs"]
        mine = [lab for lab in listed if lab["bridge"] == "skyrackt1"]
        assert mine and mine[0]["source"] == str(env.resolve()) and not mine[0]["source_exists"], listed
        assert mine[0]["running"] == mine[0]["nodes"] == hosts, mine
        sweep = subprocess.run([sys.executable, "-m", "stale_labs", "skyrackt1"], capture_output=True, text=True, timeout=300,
                               cwd=Path(__file__).parents[1], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert sweep.returncode == 0, sweep.stderr
        assert f"stale test lab on bridge skyrackt1 ({hosts} of {hosts} nodes running" in sweep.stderr, sweep.stderr
        assert "stopped r01-n01" in sweep.stderr and "removed bridge skyrackt1" in sweep.stderr, sweep.stderr
    finally:
        down = run_cli("lab", "down", "--bridge", "skyrackt1", timeout=300) if paths.root.exists() else None
    assert down is None or down.returncode == 0, down.stderr
    assert not Path("/sys/class/net/skyrackt1").exists()
    assert not paths.root.exists()
    assert "skyrackt1" not in subprocess.run(["iptables", "-w", "-t", "mangle", "-S"], capture_output=True,
                                             text=True).stdout
    assert str(paths.root) not in Path("/proc/self/mountinfo").read_text()
    assert not any((h / "skyrack-lab-skyrackt1").exists() for h in Path("/sys/fs/cgroup").iterdir())
    for what in ("nodes", "receptor"):  # no node and not the lab's Receptor
        leftover = subprocess.run(["pgrep", "-f", f"{paths.root}/{what}"], capture_output=True, text=True).stdout
        assert leftover == "", what


def test_user_data_for_a_host_not_in_the_lab_is_refused(tmp_path):
    env = variants.make(CONFIGS / "lab.yaml", tmp_path / "env", "skyrackt9", 9)
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "etcd-9.yaml").write_text("#cloud-config\n{}\n")
    proc = run_cli("lab", "up", str(env), "--seed-dir", str(seeds))
    assert proc.returncode == 1
    assert "cloud-init user-data for hosts not in this lab: etcd-9" in proc.stderr
    assert not Paths.for_bridge("skyrackt9").root.exists()
