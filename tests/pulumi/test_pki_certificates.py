"""skyrack.pki and skyrack.certs: certificates that etcd, kubeadm and TLS clients accept (no Pulumi)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from skyrack import certs, pki
from skyrack import plan as planmod
from support import need

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(scope="module")
def lab() -> tuple[planmod.Plan, certs.PlanPki]:
    plan = planmod.make(CONFIGS / "lab.yaml")
    return plan, certs.issue_all(plan)


def usages(pem: str) -> set:
    return set(pki.load_cert(pem).extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_etcd_member_certificates_name_the_member(lab) -> None:
    plan, issued = lab
    for m in plan.members_of("etcd"):
        for kind in ("server", "peer"):
            cert = issued.certs[f"{m.name}-{kind}"]
            dns, ips = pki.sans(cert.cert_pem)
            assert set(ips) == {m.ip, "127.0.0.1"} and m.fqdn in dns
            assert usages(cert.cert_pem) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
            pki.load_cert(cert.cert_pem).verify_directly_issued_by(pki.load_cert(issued.cas["etcd"].cert_pem))


def test_apiserver_serving_certificate_covers_every_name_clients_use(lab) -> None:
    plan, issued = lab
    m = plan.members_of("apiserver")[0]
    dns, ips = pki.sans(issued.certs[f"{m.name}-serving"].cert_pem)
    assert {m.ip, plan.apiserver_lb_ip, "10.96.0.1", "127.0.0.1"} <= set(ips)
    assert {"kubernetes.default.svc.cluster.local", f"api.{plan.env.dns_zone}", m.fqdn} <= set(dns)
    assert usages(issued.certs[f"{m.name}-serving"].cert_pem) == {ExtendedKeyUsageOID.SERVER_AUTH}
    assert usages(issued.certs[f"{m.name}-etcd-client"].cert_pem) == {ExtendedKeyUsageOID.CLIENT_AUTH}


def test_ca_cert_hash_matches_the_kubeadm_recipe(lab, tmp_path: Path) -> None:
    """kubeadm documents: openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum."""
    if shutil.which("openssl") is None:
        need("openssl is not installed")
    _, issued = lab
    ca = tmp_path / "ca.crt"
    ca.write_text(issued.cas["kubernetes"].cert_pem)
    pub = subprocess.run(["openssl", "x509", "-pubkey", "-noout", "-in", str(ca)], capture_output=True, check=True)
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub.stdout, capture_output=True,
                         check=True)
    digest = subprocess.run(["sha256sum"], input=der.stdout, capture_output=True, check=True).stdout.split()[0]
    assert issued.ca_cert_hash == "sha256:" + digest.decode()


def test_bootstrap_tokens_have_the_kubeadm_format_and_differ() -> None:
    tokens = {pki.bootstrap_token() for _ in range(20)}
    assert len(tokens) == 20
    assert all(re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", t) for t in tokens)


def _files(tmp: Path, name: str, issued: pki.Issued) -> tuple[str, str]:
    cert, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert.write_text(issued.cert_pem)
    key.write_text(issued.key_pem)
    return str(cert), str(key)


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, server_name: str) -> str | None:
    """TLS over loopback; returns None on success, the error text otherwise."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    errors: list[str] = []

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError) as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                client_ctx.wrap_socket(raw, server_hostname=server_name) as tls:
            tls.sendall(b"x")
            tls.recv(1)
    except (ssl.SSLError, OSError) as exc:
        errors.append(str(exc))
    finally:
        thread.join(5)
        listener.close()
    return "; ".join(errors) or None


def test_etcd_client_port_needs_a_client_certificate_from_its_ca(lab, tmp_path: Path) -> None:
    plan, issued = lab
    member = plan.members_of("etcd")[0]
    api = plan.members_of("apiserver")[0]
    ca_file = tmp_path / "etcd-ca.crt"
    ca_file.write_text(issued.cas["etcd"].cert_pem)

    def server() -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*_files(tmp_path, "server", issued.certs[f"{member.name}-server"]))
        ctx.load_verify_locations(str(ca_file))
        ctx.verify_mode = ssl.CERT_REQUIRED  # etcd --client-cert-auth
        return ctx

    def client(cert: pki.Issued | None) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(str(ca_file))
        if cert is not None:
            ctx.load_cert_chain(*_files(tmp_path, "client", cert))
        return ctx

    apiserver_client = issued.certs[f"{api.name}-etcd-client"]
    assert _handshake(server(), client(apiserver_client), "127.0.0.1") is None
    assert _handshake(server(), client(apiserver_client), member.fqdn) is None
    assert _handshake(server(), client(None), "127.0.0.1") is not None  # no client certificate
    stranger = pki.issue(pki.create_ca("someone-else"), "intruder", client=True)
    assert _handshake(server(), client(stranger), "127.0.0.1") is not None  # not signed by the etcd CA
    # An etcd server certificate does not pass for another name.
    assert _handshake(server(), client(apiserver_client), "etcd-9.example") is not None


def test_leaf_certificates_never_outlive_their_ca() -> None:
    ca = pki.create_ca("short", days=30)
    leaf = pki.issue(ca, "leaf", server=True)
    assert pki.load_cert(leaf.cert_pem).not_valid_after_utc <= pki.load_cert(ca.cert_pem).not_valid_after_utc
    with pytest.raises(ValueError, match="server or client"):
        pki.issue(ca, "useless")


def test_pki_does_not_import_pulumi() -> None:
    code = "import sys, skyrack.pki, skyrack.certs, skyrack.render.cloud_init; sys.exit('pulumi' in sys.modules)"
    src = str(Path(__file__).resolve().parents[2] / "modules")
    assert subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": src}).returncode == 0
