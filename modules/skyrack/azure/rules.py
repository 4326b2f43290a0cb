"""Network security rules per subnet, as plain data derived from the plan (no Pulumi).

Least privilege, inbound (outbound stays Azure's default: the VMs reach package
mirrors through the NAT gateway):

* API servers: 6443 only from on-prem (node CIDRs and their routed pod ranges), the
  cloud pools (their subnets hold node and pod addresses), the control plane itself,
  the operator networks (`azure.operator_cidrs`, over the VPN), and Azure's load-balancer
  health probe; and their pods (each API server's pod range, DaemonSets') anything from the cluster's pods.
* etcd and events etcd: client port 2379 only from the API-server subnet and the
  cluster's own subnet (etcdctl on a member); peer port 2380 only from the cluster's
  own subnet, so the two etcd clusters cannot even reach each other's peer port. From the operator
  networks (over the VPN) the client port and SSH, what `skyrack etcd status`, `restore` and
  `replace-member` use (mutual TLS, host keys checked); never the peer port.
* cloud pools: anything from the VNet and the networks connected to it (pods talk to
  pods everywhere, the API server reaches kubelets).
* then an explicit deny-all: Azure's default rules would otherwise admit the whole VNet
  *and every on-prem prefix behind the VPN gateway* (the VirtualNetwork tag).

The GatewaySubnet gets no NSG (Azure does not support one there).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..plan import Plan

DENY_ALL_PRIORITY = 4096
APISERVER_PORT = "6443"
ETCD_CLIENT_PORT = "2379"
ETCD_PEER_PORT = "2380"
SSH_PORT = "22"


@dataclass(frozen=True)
class Rule:
    name: str
    priority: int
    sources: tuple[str, ...]  # CIDRs, or one Azure service tag
    ports: str  # "6443", "*"
    access: str = "Allow"
    protocol: str = "Tcp"
    destinations: tuple[str, ...] = ("*",)  # CIDRs


def pool_subnet(pool_name: str) -> str:
    return f"pool-{pool_name}"


def _deny_all() -> Rule:
    return Rule("deny-all-inbound", DENY_ALL_PRIORITY, ("*",), "*", access="Deny", protocol="*")


def nsg_rules(plan: Plan) -> dict[str, list[Rule]]:
    """Rules of each subnet's NSG, keyed by NSG name (a subnet name, or `pools` for every pool subnet)."""
    env = plan.env
    s = plan.subnets
    onprem = tuple(str(c) for c in env.onprem.cidrs) + tuple(plan.onprem_pod_ranges)
    pools = tuple(p.pod_cidr for p in plan.pools)
    api: list[Rule] = [Rule("apiserver-from-onprem", 100, onprem, APISERVER_PORT)]
    if pools:
        api.append(Rule("apiserver-from-cloud-pools", 110, pools, APISERVER_PORT))
    api.append(Rule("apiserver-from-control-plane", 120, (s["apiservers"],), APISERVER_PORT))
    if env.azure.operator_networks:
        api.append(Rule("apiserver-from-operators", 130, tuple(str(c) for c in env.azure.operator_networks),
                        APISERVER_PORT))
    api.append(Rule("apiserver-health-probe", 140, ("AzureLoadBalancer",), APISERVER_PORT))
    if plan.apiserver_pod_ranges:  # pod to pod, as between racks
        api.append(Rule("apiserver-pods-from-pods", 150,
                        (*plan.onprem_pod_ranges, *pools, *plan.apiserver_pod_ranges), "*", protocol="*",
                        destinations=tuple(plan.apiserver_pod_ranges)))
    api.append(_deny_all())
    out = {"apiservers": api}
    operators = tuple(str(c) for c in env.azure.operator_networks)
    for cluster in (c for c in ("etcd", "etcd-events") if plan.members_of(c)):
        out[cluster] = [
            Rule("etcd-client-from-apiservers-and-members", 100, (s["apiservers"], s[cluster]), ETCD_CLIENT_PORT),
            Rule("etcd-peer-from-members", 110, (s[cluster],), ETCD_PEER_PORT),
        ]
        if operators:  # `skyrack etcd` from an operator's machine (docs/etcd.md)
            out[cluster] += [Rule("etcd-client-from-operators", 120, operators, ETCD_CLIENT_PORT),
                             Rule("etcd-ssh-from-operators", 130, operators, SSH_PORT)]
        out[cluster].append(_deny_all())
    if plan.pools:
        out["pools"] = [Rule("pools-from-vnet-and-onprem", 100, ("VirtualNetwork",), "*", protocol="*"), _deny_all()]
    return out


def subnet_nsg(subnet: str) -> str | None:
    """Which NSG guards a subnet (None for the gateway's)."""
    if subnet == "GatewaySubnet":
        return None
    return "pools" if subnet.startswith("pool-") else subnet
