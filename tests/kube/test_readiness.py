"""`pulumi up` waits for the API servers: /readyz polled over verified TLS with the admin's
client certificate, against a local HTTPS server that plays an API server coming up."""

from __future__ import annotations

import http.server
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from skyrack import plan as planmod
from skyrack.kube import layer, readiness

from .conftest import CONFIGS, NOW, admin_kubeconfig, control_plane_outputs, https_server, make_ca, run_program


@contextmanager
def apiserver(ca, tmp_path, not_ready_for: int) -> Iterator[tuple[str, list[str]]]:
    """An HTTPS server on loopback that requires a client certificate from `ca` and answers
    /readyz with 503 for the first `not_ready_for` requests, then 200. Yields (endpoint, paths seen)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            ready = len(seen) > not_ready_for
            self.send_response(200 if ready and self.path == "/readyz" else 503)
            self.end_headers()
            self.wfile.write(b"ok" if ready else b"[-]etcd failed")

        def log_message(self, *args) -> None:
            pass

    with https_server(ca, tmp_path, Handler) as endpoint:
        yield endpoint, seen


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_waits_until_the_api_servers_are_ready(ca, tmp_path):
    clock, logs = FakeClock(), []
    with apiserver(ca, tmp_path, not_ready_for=2) as (endpoint, seen):
        attempts = readiness.wait_for_apiserver(endpoint, ca.cert_pem, admin_kubeconfig(ca, endpoint),
                                                timeout_s=600, interval_s=10, log=logs.append,
                                                clock=clock, sleep=clock.sleep)
    assert attempts == 3 and seen == ["/readyz"] * 3 and clock.sleeps == [10, 10]
    assert "HTTP 503" in logs[0] and "ready (attempt 3)" in logs[-1]


def test_gives_up_with_a_clear_message_after_the_timeout(ca, tmp_path):
    clock = FakeClock()
    with apiserver(ca, tmp_path, not_ready_for=10**6) as (endpoint, _), pytest.raises(readiness.NotReady) as exc:
        readiness.wait_for_apiserver(endpoint, ca.cert_pem, admin_kubeconfig(ca, endpoint), timeout_s=60,
                                     interval_s=10, log=lambda _: None, clock=clock, sleep=clock.sleep)
    assert "not ready after 60s" in str(exc.value) and "HTTP 503" in str(exc.value)
    assert "run `pulumi up` again" in str(exc.value)


def test_an_api_server_with_a_certificate_from_another_ca_is_never_ready(ca, tmp_path):
    """TLS is verified against the exported CA: an impostor does not count as ready."""
    clock = FakeClock()
    with apiserver(make_ca(), tmp_path, not_ready_for=0) as (endpoint, seen), \
            pytest.raises(readiness.NotReady, match="CERTIFICATE_VERIFY_FAILED"):
        readiness.wait_for_apiserver(endpoint, ca.cert_pem, admin_kubeconfig(ca, endpoint), timeout_s=20,
                                     interval_s=10, log=lambda _: None, clock=clock, sleep=clock.sleep)
    assert seen == []


def test_the_layer_waits_before_creating_anything_and_skips_waiting_in_preview(ca, tmp_path, monkeypatch):
    p = planmod.make(CONFIGS / "dev.yaml")
    monkeypatch.setattr(layer, "READY_INTERVAL_S", 0.05)
    with apiserver(ca, tmp_path, not_ready_for=1) as (endpoint, seen):
        cp = control_plane_outputs(p, ca)
        cp.apiserver_endpoint = endpoint
        cp.admin_kubeconfig = admin_kubeconfig(ca, endpoint)
        res = run_program("dev", lambda: layer.ClusterLayer("c", p, cp, now=NOW, wait_timeout_s=30))
        assert seen == ["/readyz", "/readyz"]
        provider = next(r for r in res if r.typ == "pulumi:providers:kubernetes")
        assert "client-certificate-data" in str(provider.inputs["kubeconfig"])
        seen.clear()
        run_program("dev", lambda: layer.ClusterLayer("c", p, cp, now=NOW, wait_timeout_s=30), preview=True)
        assert seen == []
