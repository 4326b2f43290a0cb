"""Keys, certificates and tokens as Pulumi resources: made once, kept in state as secrets.

A Pulumi dynamic provider wraps `skyrack.pki` (the same code the lab calls), so a key
is generated when its resource is created and never again: `pulumi up` reads it back
from state. Private keys and tokens are secret outputs. A certificate is re-issued
only when what it certifies changes (its subject, SANs, usages or its CA): `diff`
compares exactly those inputs. To rotate deliberately: `pulumi up --replace <urn>`.

`ControlPlanePki` issues everything `skyrack.certs.specs(plan)` lists and hands the
cloud-init renderer concrete values per member (as secret outputs).
"""

from __future__ import annotations

import uuid
from typing import Any

import pulumi
from pulumi import dynamic

from .. import certs, pki
from ..plan import Member, Plan
from ..render.cloud_init import ApiServerPki, EtcdPki, WorkerJoin

# Inputs whose change means a new key/certificate; anything else never triggers one.
IDENTITY = ("kind", "common_name", "organization", "dns_names", "ips", "server", "client", "ca_cert_pem")
SECRET_OUTPUTS = ["key_pem", "value", "ca_key_pem"]


def make(props: dict[str, Any]) -> dict[str, Any]:
    """What one resource of `kind` holds, freshly generated. Pure; used by the provider and the test mocks."""
    kind = props["kind"]
    if kind == "ca":
        ca = pki.create_ca(props["common_name"])
        return {"cert_pem": ca.cert_pem, "key_pem": ca.key_pem, "cert_hash": pki.ca_cert_hash(ca.cert_pem),
                "not_after": pki.not_after(ca.cert_pem)}
    if kind == "cert":
        leaf = pki.issue(pki.Issued(props["ca_cert_pem"], props["ca_key_pem"]), props["common_name"],
                         organization=props.get("organization"), dns_names=props.get("dns_names") or (),
                         ips=props.get("ips") or (), server=bool(props.get("server")), client=bool(props.get("client")))
        return {"cert_pem": leaf.cert_pem, "key_pem": leaf.key_pem, "not_after": pki.not_after(leaf.cert_pem)}
    if kind == "keypair":
        kp = pki.keypair()
        return {"public_pem": kp.cert_pem, "key_pem": kp.key_pem}
    if kind == "ssh":
        private, public = pki.ssh_keypair()
        return {"public_key": public, "key_pem": private}
    if kind == "token":
        return {"value": pki.bootstrap_token()}
    if kind == "secret":
        return {"value": pki.random_secret()}
    raise ValueError(f"unknown kind {kind!r}")


class PkiProvider(dynamic.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        inputs = {k: v for k, v in props.items() if not k.startswith("__")}
        return dynamic.CreateResult(id_=uuid.uuid4().hex, outs={**inputs, **make(inputs)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = [k for k in IDENTITY if _norm(olds.get(k)) != _norm(news.get(k))]
        return dynamic.DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=False)


def _norm(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


_PROVIDER = PkiProvider()
_OUTPUTS = ("cert_pem", "key_pem", "cert_hash", "not_after", "public_pem", "public_key", "value")


class _Pki(dynamic.Resource):
    cert_pem: pulumi.Output[str]
    key_pem: pulumi.Output[str]
    cert_hash: pulumi.Output[str]
    not_after: pulumi.Output[str]
    public_pem: pulumi.Output[str]
    public_key: pulumi.Output[str]
    value: pulumi.Output[str]

    def __init__(self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None):
        secret = pulumi.ResourceOptions(additional_secret_outputs=SECRET_OUTPUTS)
        super().__init__(_PROVIDER, name, {**dict.fromkeys(_OUTPUTS), **props},
                         pulumi.ResourceOptions.merge(opts, secret))
        # The engine encrypts these in state (additional_secret_outputs); marking the outputs
        # secret here as well keeps every value derived from them secret in this program.
        self.key_pem = pulumi.Output.secret(self.key_pem)
        self.value = pulumi.Output.secret(self.value)


class CertificateAuthority(_Pki, module="skyrack", name="CertificateAuthority"):
    def __init__(self, name: str, common_name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, {"kind": "ca", "common_name": common_name}, opts)


class Certificate(_Pki, module="skyrack", name="Certificate"):
    def __init__(self, spec: certs.CertSpec, ca: CertificateAuthority, opts: pulumi.ResourceOptions | None = None):
        super().__init__(spec.key, {
            "kind": "cert", "common_name": spec.common_name, "organization": spec.organization,
            "dns_names": list(spec.dns_names), "ips": list(spec.ips), "server": spec.server, "client": spec.client,
            "ca_cert_pem": ca.cert_pem, "ca_key_pem": ca.key_pem,
        }, opts)


class KeyPair(_Pki, module="skyrack", name="KeyPair"):
    def __init__(self, name: str, kind: str = "keypair", opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, {"kind": kind}, opts)


class RandomSecret(_Pki, module="skyrack", name="RandomSecret"):
    """kind "token": a kubeadm bootstrap token; kind "secret": a random pre-shared key."""

    def __init__(self, name: str, kind: str = "secret", opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, {"kind": kind}, opts)


class ControlPlanePki(pulumi.ComponentResource):
    """The environment's CAs, member certificates, service-account key and worker join token."""

    def __init__(self, name: str, plan: Plan, opts: pulumi.ResourceOptions | None = None):
        super().__init__("skyrack:azure:ControlPlanePki", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.plan = plan
        self.cas = {ca: CertificateAuthority(f"{ca}-ca", certs.ca_common_name(plan, ca), child) for ca in certs.CAS}
        self.certs = {s.key: Certificate(s, self.cas[s.ca], child) for s in certs.specs(plan)}
        self.service_account = KeyPair("service-account", "keypair", child)
        self.bootstrap_token = RandomSecret("bootstrap-token", "token", child)  # racks: expires (cluster layer)
        # Cloud pools carry their token in the scale set's model for its whole life: their own, without expiry.
        self.pool_bootstrap_token = (RandomSecret("pool-bootstrap-token", "token", child) if plan.pools else None)
        kube = self.cas["kubernetes"]
        self.ca_cert_hash: pulumi.Output[str] = kube.cert_hash
        self.cert_expiry: pulumi.Output[str] = pulumi.Output.all(
            *(c.not_after for c in (*self.cas.values(), *self.certs.values()))).apply(min)
        self.register_outputs({"ca_cert_hash": self.ca_cert_hash, "cert_expiry": self.cert_expiry})

    def etcd(self, member: Member) -> pulumi.Output[EtcdPki]:
        server, peer = self.certs[f"{member.name}-server"], self.certs[f"{member.name}-peer"]
        return pulumi.Output.all(self.cas["etcd"].cert_pem, server.cert_pem, server.key_pem,
                                 peer.cert_pem, peer.key_pem).apply(lambda v: EtcdPki(*v))

    def apiserver(self, member: Member) -> pulumi.Output[ApiServerPki]:
        kube, proxy, etcd = self.cas["kubernetes"], self.cas["front-proxy"], self.cas["etcd"]
        serving, client = self.certs[f"{member.name}-serving"], self.certs[f"{member.name}-etcd-client"]
        return pulumi.Output.all(
            kube.cert_pem, kube.key_pem, proxy.cert_pem, proxy.key_pem,
            self.service_account.key_pem, self.service_account.public_pem,
            serving.cert_pem, serving.key_pem, etcd.cert_pem, client.cert_pem, client.key_pem,
            self.bootstrap_token.value, kube.cert_hash,
        ).apply(lambda v: ApiServerPki(*v))

    def pool_join(self) -> pulumi.Output[WorkerJoin]:
        """What a cloud-pool node joins with: the pools' own token (never the racks' expiring one)."""
        if self.pool_bootstrap_token is None:
            raise ValueError("the environment has no cloud pools")
        return pulumi.Output.all(self.pool_bootstrap_token.value, self.ca_cert_hash).apply(lambda v: WorkerJoin(*v))
