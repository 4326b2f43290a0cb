"""`skyrack lab up|status`: the session lab's real nodes, their identity, their isolation (recovery and teardown: tests/labhost)."""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess

import pytest

from skyrack.lab import site
from support import run_cli

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_up_starts_every_host_with_its_own_identity(lab):
    st = lab.status()
    names = [h["name"] for h in st["hosts"]]
    assert names == ["apiserver-0", "etcd-0", "etcd-1", "etcd-2", "r01-n01", "r01-n02", "r02-n01", "x01", "x02"]
    assert all(h["running"] and h["ssh"] for h in st["hosts"]), st["hosts"]
    assert st["bridge"] and st["rules"] and st["apt_proxy"] == "https://198.18.1.1:3142"
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
    assert after["balancer_pid"] == before["balancer_pid"], "the load balancer was restarted for nothing"


# A plain-HTTP GET through the HTTPS proxy, as apt sends it, from a node: prints the status line or the error.
PROXY_PROBE = """python3 -c "
import socket, ssl
ctx = ssl.create_default_context({cafile})
try:
    s = ctx.wrap_socket(socket.create_connection(('198.18.1.1', 3142), timeout=5), server_hostname='198.18.1.1')
    s.sendall(b'GET http://example.invalid/ HTTP/1.1\\r\\nHost: example.invalid\\r\\nConnection: close\\r\\n\\r\\n')
    print(s.recv(200).split(b'\\r\\n')[0].decode())
except Exception as e:
    print(type(e).__name__, e)
" """
PUBLIC_ONLY = "/usr/share/ca-certificates/mozilla/ISRG_Root_X1.crt"  # a public root: not the site's CA


def test_nodes_reach_only_the_host_and_its_debian_mirrors(lab):
    # Packages through the proxy work (apiserver-0: its user-data made it trust the site's CA) ...
    assert lab.ssh("apiserver-0", "apt-get update -q >/dev/null && echo ok").strip() == "ok"
    # ... any other host is refused by the proxy ...
    assert lab.ssh("apiserver-0", PROXY_PROBE.format(cafile="")).startswith("HTTP/1.1 403"), "not refused"
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


def test_the_mirrors_are_https_with_the_sites_ca_and_refused_without_it(lab):
    ca = site.SITE_CA
    for port in (site.PROXY_PORT, site.REGISTRY_PORT):
        # with the lab's CA (what `mirrors.ca` names) the certificate verifies, for the bridge address ...
        with socket.create_connection(("198.18.1.1", port), timeout=5) as raw, \
                ssl.create_default_context(cafile=str(ca)).wrap_socket(raw, server_hostname="198.18.1.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
        # ... this host, whose trust store the lab never touches, refuses it ...
        with socket.create_connection(("198.18.1.1", port), timeout=5) as raw, \
                pytest.raises(ssl.SSLCertVerificationError, match="self-signed certificate in certificate chain"):
            ssl.create_default_context().wrap_socket(raw, server_hostname="198.18.1.1")
    # ... and nothing answers in plain HTTP (the registry says so; the proxy closes on a failed handshake)
    assert b"HTTPS server" in subprocess.run(["curl", "-sS", "http://198.18.1.1:5000/v2/"], capture_output=True).stdout
    assert subprocess.run(["curl", "-sS", "-m", "5", "http://198.18.1.1:3142/"], capture_output=True).returncode != 0
    # A node trusts the site's CA through the production path: cloud-init on the control plane, the os_baseline
    # role on a rack node (test_join joined it); with public CAs only, apt and Python refuse every mirror.
    for host in ("apiserver-0", "r01-n01"):
        assert lab.ssh(host, PROXY_PROBE.format(cafile="")).startswith("HTTP/1.1 403"), host
        refused = lab.ssh(host, PROXY_PROBE.format(cafile=f"cafile='{PUBLIC_ONLY}'"))
        assert refused.startswith("SSLCertVerificationError"), (host, refused)
    out = lab.ssh("r01-n01", f"apt-get -o Acquire::https::CaInfo={PUBLIC_ONLY} update --error-on=any 2>&1; "
                             "echo rc=$?", check=False)
    assert out.rstrip().endswith("rc=100"), out
    for source in ("https://198.18.1.1:3142/kubernetes/", "http://deb.debian.org/debian bookworm "):  # direct; proxied
        assert re.search(f"Err:.*{re.escape(source)}.*\n +Certificate verification failed", out), (source, out)
    # containerd through the HTTPS registry, with the hosts.toml the role wrote (its `ca`: the system bundle)
    pull = "ctr -n k8s.io images pull --hosts-dir /etc/containerd/certs.d registry.k8s.io/pause:3.10.2 >/dev/null"
    assert lab.ssh("r01-n01", f"{pull} && echo pulled").strip() == "pulled"
