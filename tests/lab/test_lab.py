"""`skyrack lab up|status|down`: real nodes, their identity, their isolation, recovery and teardown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import lab_variants as variants
from skyrack.lab.state import Paths
from support import CONFIGS, need, run_cli

from .conftest import lab_missing

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_up_starts_every_host_with_its_own_identity(lab):
    st = lab.status()
    names = [h["name"] for h in st["hosts"]]
    assert names == ["apiserver-0", "etcd-0", "etcd-1", "etcd-2", "r01-n01", "r01-n02", "r02-n01", "x01", "x02"]
    assert all(h["running"] and h["ssh"] for h in st["hosts"]), st["hosts"]
    assert st["bridge"] and st["rules"] and st["apt_proxy"] == "http://198.18.1.1:3142"
    ids = {}
    for h in st["hosts"]:
        # SSH with StrictHostKeyChecking against the known_hosts `lab up` wrote
        out = lab.ssh(h["name"], "hostname; cat /etc/machine-id; ip -4 -o addr show host0; "
                                 "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub; systemctl is-system-running")
        hostname, machine_id, addr, key, state = out.splitlines()
        assert hostname == h["name"]
        assert f" {h['ip']}/24 " in addr
        assert state == "running", f"{h['name']}: systemd is {state}"
        ids[h["name"]] = (machine_id, key.split()[1])
    assert len({m for m, _ in ids.values()}) == len(ids), "machine-ids are shared"
    assert len({k for _, k in ids.values()}) == len(ids), "SSH host keys are shared"


def test_cloud_init_finished_and_the_seed_hook_works(lab):
    assert "status: done" in lab.ssh("etcd-0", "cloud-init status")
    assert lab.ssh("r02-n01", "cat /etc/skyrack-seeded").strip() == "seeded by the lab test"
    assert lab.ssh("etcd-0", "test -e /etc/skyrack-seeded || echo absent").strip() == "absent"


def test_up_again_changes_nothing(lab):
    before = json.loads(lab.paths.state.read_text())
    proc = run_cli("lab", "up", str(lab.env), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    after = json.loads(lab.paths.state.read_text())
    assert {n: h["pid"] for n, h in after["hosts"].items()} == {n: h["pid"] for n, h in before["hosts"].items()}


def test_nodes_reach_only_the_host_and_its_debian_mirrors(lab):
    # Packages through the proxy work ...
    assert lab.ssh("r01-n01", "apt-get update -q >/dev/null && echo ok").strip() == "ok"
    probe = ("python3 -c \"import urllib.request as u, sys\n"
             "o = u.build_opener(u.ProxyHandler({'http': 'http://198.18.1.1:3142'}))\n"
             "try:\n    o.open('http://example.invalid/', timeout=5)\nexcept Exception as e:\n    print(e)\"")
    # ... any other host is refused by the proxy ...
    assert "403" in lab.ssh("r01-n01", probe)
    # ... and nothing is routed off the machine: no default route works beyond the host.
    assert "unreachable" in lab.ssh("r01-n01", "python3 -c \"import socket\ntry:\n"
                                              "    socket.create_connection(('192.0.2.1', 80), timeout=3)\n"
                                              "except OSError as e:\n    print('unreachable', e)\"")
    # The lab's own /24 may cross no interface but its bridge (each lab owns one /24 of
    # 198.18.0.0/15, so labs side by side never drop each other's traffic).
    listing = subprocess.run(["iptables", "-w", "-t", "mangle", "-S", "FORWARD"], capture_output=True,
                             text=True, check=True).stdout
    for rule in (["-s", "198.18.1.0/24", "!", "-o", "skyrackt0"], ["-d", "198.18.1.0/24", "!", "-i", "skyrackt0"]):
        assert any(" ".join(rule) in line and line.endswith("-j DROP") for line in listing.splitlines()), listing


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


def test_up_recovers_from_a_crash_and_down_removes_everything(tmp_path):
    """A small lab of its own: kill its processes hard, `up` recovers with disks intact, `down` leaves nothing."""
    if lab_missing():
        need(str(lab_missing()))
    env = variants.make(CONFIGS / "lab.yaml", tmp_path, "skyrackt1", 3, rack_nodes=1, etcd=1, kubernetes=False,
                        racks=1)  # and its execution node x01, with the lab's Receptor
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
        time.sleep(1)
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
    finally:
        down = run_cli("lab", "down", str(env), timeout=300)
    assert down.returncode == 0, down.stderr
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
