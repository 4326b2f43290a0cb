"""The lab's stand-in for the API servers' load balancer: the real haproxy with the configuration `lab up` renders.

What the lab copies from Azure's load balancer (azure/apiservers.py), shown on this host with two HTTPS
backends that answer `/readyz` as an API server does: traffic only to a server whose probe passes, a server
taken out after `threshold` failed probes and back after one success, and a request that meets a server
which went away between probes sent to the other. tests/lab/test_join.py shows it in front of the lab's
real API servers.
"""

from __future__ import annotations

import http.server
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass

import pytest

from skyrack import pki
from skyrack import plan as planmod
from skyrack.lab import balancer
from skyrack.lab.state import Paths
from skyrack.render import render
from skyrack.tuning import LB_PROBE_INTERVAL_S, LB_PROBE_THRESHOLD
from support import CONFIGS, need

FRONT, BACKENDS = "127.0.0.1", {"apiserver-0": "127.0.0.2", "apiserver-1": "127.0.0.3"}


@pytest.fixture(scope="module")
def haproxy():
    binary = shutil.which("haproxy")
    if binary is None:
        need("haproxy is not installed (scripts/apt-packages.txt)")
    return binary


def test_the_configuration_lab_up_renders_is_one_haproxy_accepts(haproxy, tmp_path):
    plan = planmod.make(CONFIGS / "lab.yaml")
    paths = Paths(tmp_path)
    text = balancer.config(plan, paths)
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(text)
    balancer.ca_path(paths).write_text(pki.create_ca("test").cert_pem)
    balancer.check(cfg)
    members = plan.members_of("apiserver")
    assert members, "the lab's API servers are behind the load balancer"
    servers = re.findall(r"^\s+server (\S+) (\S+)$", text, re.M)
    assert servers == [(m.name, f"{m.ip}:6443") for m in members]
    assert f"bind {plan.apiserver_lb_ip}:6443" in text and plan.apiserver_endpoint == f"https://{plan.apiserver_lb_ip}:6443"
    # Azure's probe, from the same constants the API servers' shutdown delay is derived from
    assert f"inter {LB_PROBE_INTERVAL_S}s fall {LB_PROBE_THRESHOLD} rise 1" in text
    assert "option httpchk GET /readyz" in text


def test_haproxy_refusing_a_configuration_is_one_clear_error(haproxy, tmp_path):
    cfg = tmp_path / "bad.cfg"
    cfg.write_text("frontend x\n    bind 127.0.0.1:notaport\n")
    with pytest.raises(balancer.BalancerError, match=f"haproxy refuses {cfg}"):
        balancer.check(cfg)


@dataclass(frozen=True)
class Backend:
    name: str
    ip: str


class ApiServer(http.server.BaseHTTPRequestHandler):
    """`/readyz` as the server's `ready` flag says; anything else answers the server's name."""

    def do_GET(self):
        srv = self.server
        ready = self.path != "/readyz" or srv.ready  # type: ignore[attr-defined]
        body = (srv.name if self.path != "/readyz" else ("ok" if ready else "not ready")).encode()  # type: ignore[attr-defined]
        self.send_response(200 if ready else 500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


def serve(name: str, ip: str, port: int, ctx: ssl.SSLContext) -> http.server.ThreadingHTTPServer:
    srv = http.server.ThreadingHTTPServer((ip, port), ApiServer)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.name, srv.ready = name, True  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_traffic_follows_the_probe_of_readyz_and_a_vanished_server_is_skipped(haproxy, tmp_path):
    ca = pki.create_ca("cluster CA")
    leaf = pki.issue(ca, "kube-apiserver", ips=[FRONT, *BACKENDS.values()], server=True)
    (tmp_path / "tls.crt").write_text(leaf.cert_pem)
    (tmp_path / "tls.key").write_text(leaf.key_pem)
    (tmp_path / "ca.crt").write_text(ca.cert_pem)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    with socket.socket() as s:
        s.bind((FRONT, 0))
        port = s.getsockname()[1]
    servers = {name: serve(name, ip, port, server_ctx) for name, ip in BACKENDS.items()}
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(render("lab/haproxy.cfg.j2", env_name="test", lb_ip=FRONT, port=port, ca_file=str(tmp_path / "ca.crt"),
                          members=[Backend(n, ip) for n, ip in BACKENDS.items()],
                          interval_s=1, threshold=2))
    proc = subprocess.Popen([haproxy, "-db", "-f", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    deadline = time.monotonic() + 15
    while proc.poll() is None and time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex((FRONT, port)) == 0:
                break
        time.sleep(0.1)

    def who(n: int = 8) -> set[str]:
        got = set()
        for _ in range(n):
            with urllib.request.urlopen(f"https://{FRONT}:{port}/who", context=client, timeout=10) as r:
                got.add(r.read().decode())
        return got

    def settled(expected: set[str]) -> set[str] | None:
        # while the probe changes its mind a request may meet a server at the wrong moment: this wait counts
        # a failed request as unsettled, the assertions after it count it as a failure
        try:
            return got if (got := who()) == expected else None
        except (OSError, ssl.SSLError):  # urllib's URLError is an OSError
            return None

    def until(expected: set[str], timeout: float = 15) -> set[str] | None:
        deadline = time.monotonic() + timeout
        while (got := settled(expected)) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        return got

    try:
        assert until(set(BACKENDS)) == set(BACKENDS)  # both probed ready: both get traffic
        servers["apiserver-1"].ready = False  # type: ignore[attr-defined]
        assert until({"apiserver-0"}) == {"apiserver-0"}  # out after two failed probes
        time.sleep(2)
        assert who(12) == {"apiserver-0"}  # and stays out while it is not ready
        servers["apiserver-1"].ready = True  # type: ignore[attr-defined]
        assert until(set(BACKENDS)) == set(BACKENDS)  # back after one good probe
        # a server that goes away between two probes: every request still answered, by the other
        servers["apiserver-0"].shutdown()
        servers["apiserver-0"].server_close()
        assert who(12) == {"apiserver-1"}
    finally:
        proc.terminate()
        log = proc.communicate(timeout=10)[0].decode()
        for srv in servers.values():
            srv.server_close()
    assert "apiserver-1" in log and "DOWN" in log, log  # haproxy's own account of the probe
