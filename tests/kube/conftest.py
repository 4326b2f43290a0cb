"""Fixtures for the cluster layer: a throwaway CA, the control-plane stack's outputs, and a
recording Pulumi mock that returns every Kubernetes object the program would send."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import http.server
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from skyrack import plan as planmod
from support import unwrap

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
NOW = dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.UTC)
TOKEN = "abcdef.0123456789abcdef"
POOL_TOKEN = "pool01.fedcba9876543210"


@dataclass
class CA:
    cert_pem: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def hash(self) -> str:
        """kubeadm's --discovery-token-ca-cert-hash: sha256 of the DER SubjectPublicKeyInfo."""
        spki = self.cert.public_key().public_bytes(serialization.Encoding.DER,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)
        return "sha256:" + hashlib.sha256(spki).hexdigest()

    def issue(self, cn: str, *, server_ips: list[str] = (), client: bool = False) -> tuple[bytes, bytes]:
        """A leaf certificate and key (PEM) signed by this CA."""
        import ipaddress

        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
             .issuer_name(self.cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5))
             .not_valid_after(dt.datetime.now(dt.UTC) + dt.timedelta(days=1)))
        if server_ips:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]), critical=False)
        if client:
            b = b.add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        cert = b.sign(self.key, hashes.SHA256())
        return (cert.public_bytes(serialization.Encoding.PEM),
                key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


def make_ca() -> CA:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5))
            .not_valid_after(dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return CA(cert.public_bytes(serialization.Encoding.PEM).decode(), key, cert)


@pytest.fixture(scope="session")
def ca() -> CA:
    return make_ca()


def admin_kubeconfig(ca: CA, endpoint: str) -> str:
    cert, key = ca.issue("kubernetes-admin", client=True)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return (f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {endpoint}\n"
            f"    certificate-authority-data: {b64(ca.cert_pem.encode())}\n"
            f"users:\n- name: admin\n  user:\n    client-certificate-data: {b64(cert)}\n"
            f"    client-key-data: {b64(key)}\n"
            f"contexts:\n- name: admin\n  context: {{cluster: c, user: admin}}\ncurrent-context: admin\n")


@dataclass
class Registered:
    typ: str
    name: str
    inputs: dict[str, Any]

    @property
    def manifest(self) -> dict[str, Any]:
        """The Kubernetes object as the provider would send it, secrets unwrapped."""
        return unwrap(self.inputs)

    @property
    def kind(self) -> str:
        return self.inputs.get("kind", "")



@dataclass
class Recorder(pulumi.runtime.Mocks):
    resources: list[Registered] = field(default_factory=list)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        self.resources.append(Registered(args.typ, args.name, args.inputs))
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict, list | None]:
        return {}, None


@dataclass
class Rendered:
    plan: planmod.Plan
    resources: list[Registered]
    ca: CA

    def objects(self, kind: str | None = None) -> list[Registered]:
        return [r for r in self.resources if r.typ.startswith("kubernetes:") and r.typ != "pulumi:providers:kubernetes"
                and (kind is None or r.kind == kind)]

    def one(self, kind: str, name: str, namespace: str | None = None) -> Registered:
        found = [r for r in self.objects(kind) if r.manifest["metadata"]["name"] == name
                 and r.manifest["metadata"].get("namespace") == namespace]
        assert len(found) == 1, f"{kind} {namespace}/{name}: {len(found)} found"
        return found[0]


def run_program(env: str, program: Callable[[], None], *, preview: bool = False,
                rec: Recorder | None = None) -> list[Registered]:
    """Run a Pulumi program under mocks, isolated: a fresh root resource and a fresh recorder."""
    pulumi.runtime.settings.ROOT.set(None)
    rec = rec or Recorder()
    pulumi.runtime.set_mocks(rec, project="skyrack-cluster", stack=env, preview=preview, organization="acme")

    @pulumi.runtime.test
    def go() -> None:
        program()

    go()
    return rec.resources


def control_plane_outputs(p: planmod.Plan, ca: CA, **extra: Any):
    from skyrack.kube.layer import ControlPlane

    if p.pools:  # the control-plane stack exports the pools' own token when there are pools
        extra.setdefault("pool_bootstrap_token", pulumi.Output.secret(POOL_TOKEN))
    return ControlPlane(apiserver_endpoint=p.apiserver_endpoint, ca_cert_pem=ca.cert_pem,
                        bootstrap_token=pulumi.Output.secret(TOKEN),
                        admin_kubeconfig=pulumi.Output.secret(admin_kubeconfig(ca, p.apiserver_endpoint)), **extra)


_cache: dict[str, Rendered] = {}


@pytest.fixture
def rendered(ca: CA) -> Callable[[str], Rendered]:
    """The whole cluster layer for a shipped environment, rendered once per session per environment."""

    def _render(env: str) -> Rendered:
        if env not in _cache:
            from skyrack.kube.layer import ClusterLayer

            p = planmod.make(CONFIGS / f"{env}.yaml")
            cp = control_plane_outputs(p, ca)
            resources = run_program(env, lambda: ClusterLayer("cluster", p, cp, now=NOW, wait_timeout_s=None))
            _cache[env] = Rendered(p, resources, ca)
        return _cache[env]

    return _render


@contextlib.contextmanager
def https_server(ca: CA, tmp_path: Path, handler: type[http.server.BaseHTTPRequestHandler],
                 client_cert: bool = True) -> Iterator[str]:
    """`handler` behind TLS on loopback, its certificate from `ca`, a client certificate from `ca` required
    (as an API server requires one from the admin; `client_cert=False`: verified when given, as a real API server
    that also takes tokens). Yields the endpoint."""
    cert, key = ca.issue("kube-apiserver", server_ips=["127.0.0.1"])
    (tmp_path / "s.crt").write_bytes(cert)
    (tmp_path / "s.key").write_bytes(key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "s.crt", tmp_path / "s.key")
    ctx.load_verify_locations(cadata=ca.cert_pem)
    ctx.verify_mode = ssl.CERT_REQUIRED if client_cert else ssl.CERT_OPTIONAL
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
