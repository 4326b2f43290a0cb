"""Which certificates a plan needs: their CAs, subjects, SANs and usages (no Pulumi).

One list, read by the Azure stack (which issues each certificate once, through a
Pulumi dynamic provider, and keeps it in state) and by the lab (which calls
`issue_all` and gets the same certificates in one call). SANs come from the plan
only: a member's address, its name in the private DNS zone, and loopback.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import pki
from .plan import Member, Plan

# CA name in the plan -> what it signs
CAS = ("kubernetes", "etcd", "front-proxy")
API_RECORD = "api"  # api.<dns zone> -> the API servers' load balancer
ADMIN_GROUP = "kubeadm:cluster-admins"  # bound to cluster-admin by `kubeadm init` (Kubernetes >= 1.29)


@dataclass(frozen=True)
class CertSpec:
    key: str  # stable id, also the Pulumi resource name: etcd-0-peer, apiserver-1-serving, admin
    ca: str  # one of CAS
    common_name: str
    organization: str | None = None
    dns_names: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    server: bool = False
    client: bool = False


def ca_common_name(plan: Plan, ca: str) -> str:
    return f"skyrack-{plan.env.name}-{ca}-ca"


def api_fqdn(plan: Plan) -> str:
    return f"{API_RECORD}.{plan.env.dns_zone}"


def etcd_specs(member: Member) -> list[CertSpec]:
    """Server (client port, also used by etcdctl on the member) and peer certificate of an etcd member."""
    dns = (member.name, member.fqdn, "localhost")
    ips = (member.ip, "127.0.0.1")
    return [
        CertSpec(f"{member.name}-server", "etcd", member.fqdn, None, dns, ips, server=True, client=True),
        CertSpec(f"{member.name}-peer", "etcd", member.fqdn, None, dns, ips, server=True, client=True),
    ]


def apiserver_specs(plan: Plan, member: Member) -> list[CertSpec]:
    """The API server's serving certificate and its client certificate for etcd."""
    domain = plan.env.kubernetes.cluster_domain
    dns = (member.name, member.fqdn, api_fqdn(plan), "kubernetes", "kubernetes.default",
           "kubernetes.default.svc", f"kubernetes.default.svc.{domain}", "localhost")
    ips = (member.ip, plan.apiserver_lb_ip, plan.api_service_ip, "127.0.0.1")
    return [
        CertSpec(f"{member.name}-serving", "kubernetes", "kube-apiserver", None, dns, ips, server=True),
        CertSpec(f"{member.name}-etcd-client", "etcd", f"kube-apiserver-etcd-client-{member.name}", client=True),
    ]


def admin_spec(plan: Plan) -> CertSpec:
    return CertSpec("admin", "kubernetes", f"skyrack-{plan.env.name}-admin", ADMIN_GROUP, client=True)


def specs(plan: Plan) -> list[CertSpec]:
    """Every leaf certificate of the environment, in a stable order."""
    out: list[CertSpec] = []
    for m in plan.members:
        out += apiserver_specs(plan, m) if m.role == "apiserver" else etcd_specs(m)
    out.append(admin_spec(plan))
    return out


# ----------------------------------------------------------------------------- issuing in one call (the lab)


@dataclass
class PlanPki:
    """Everything `specs` describes, issued: what the lab writes into its nodes' seeds."""

    cas: dict[str, pki.Issued]
    certs: dict[str, pki.Issued]
    service_account: pki.Issued
    bootstrap_token: str
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def ca_cert_hash(self) -> str:
        return pki.ca_cert_hash(self.cas["kubernetes"].cert_pem)


def issue_spec(ca: pki.Issued, spec: CertSpec) -> pki.Issued:
    return pki.issue(ca, spec.common_name, organization=spec.organization, dns_names=spec.dns_names,
                     ips=spec.ips, server=spec.server, client=spec.client)


def issue_all(plan: Plan) -> PlanPki:
    cas = {name: pki.create_ca(ca_common_name(plan, name)) for name in CAS}
    certs = {s.key: issue_spec(cas[s.ca], s) for s in specs(plan)}
    return PlanPki(cas=cas, certs=certs, service_account=pki.keypair(), bootstrap_token=pki.bootstrap_token())

