"""`skyrack lab up|status`: the session lab's real nodes, their identity, their isolation (recovery and teardown: tests/labhost)."""

from __future__ import annotations

import json
import subprocess

import pytest

from support import run_cli

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
