"""The environment's network: VNet and subnets, NSGs, NAT gateway, private DNS.

Subnets come from the plan (`plan.subnets`); NSG rules from `rules.nsg_rules`. Each
cloud pool gets one subnet equal to its pod range (`PoolPlan.pod_cidr`, already in the
VNet's address space): its VMs take their own address *and* their pods' secondary IP
configurations from it, so every IP configuration of a NIC is in one subnet (the
layout of AKS's Azure CNI). The plan's `pools` node subnet is therefore not created.

Control-plane VMs have no public addresses; a NAT gateway gives them outbound access
(package mirrors, container images). Members are named in a private DNS zone
(`<env>.skyrack.internal`), plus `api.<zone>` for the load balancer. With on-prem mirror
names, the delegated subnet `dns-resolver` holds the DNS Private Resolver (`dns`).

Each API server is a Node with its own pod range (from the lock, in the VNet's address space so the VPN
gateway advertises it to on-prem): the route table `pod-routes` sends each range to its VM (next hop
VirtualAppliance, the VM's NIC forwarding), from the gateway (on-prem pods), the API servers and the pools.
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import network, privatedns

from .. import certs
from ..plan import Plan
from . import dns, rules
from .context import Context

CONTROL_PLANE_SUBNETS = ("apiservers", "etcd", "etcd-events")
ROUTE_TABLE = "pod-routes"


def pod_routes(plan: Plan) -> list[dict[str, str]]:
    """The route table's routes: each API server's pod range to the API server."""
    return [{"name": f"pods-{m.name}", "address_prefix": m.pod_cidr, "next_hop_type": "VirtualAppliance",
             "next_hop_ip_address": m.ip} for m in plan.members if m.pod_cidr]


def routed_subnet(subnet: str) -> bool:
    """Whether a subnet's traffic may be for an API server's pods: from on-prem (the gateway), the API
    servers themselves and the cloud pools' pods. etcd and the DNS resolver never talk to pods."""
    return subnet in ("GatewaySubnet", "apiservers") or subnet.startswith("pool-")


def subnet_layout(ctx: Context, dns_resolver: bool = False) -> dict[str, str]:
    """Subnets that exist in Azure: name -> CIDR, in a stable order."""
    plan = ctx.plan
    out = {"GatewaySubnet": plan.subnets["GatewaySubnet"]}
    out.update({name: plan.subnets[name] for name in CONTROL_PLANE_SUBNETS
                if name != "etcd-events" or plan.members_of("etcd-events")})
    if dns_resolver:
        out[dns.SUBNET] = plan.subnets[dns.SUBNET]
    out.update({rules.pool_subnet(p.name): p.pod_cidr for p in plan.pools})
    return out


def security_rule(rule: rules.Rule) -> dict[str, object]:
    """One NSG rule as Azure wants it (a single source, a tag, or a list of prefixes)."""
    out: dict[str, object] = {
        "name": rule.name, "priority": rule.priority, "direction": "Inbound", "access": rule.access,
        "protocol": rule.protocol, "source_port_range": "*", "destination_port_range": rule.ports,
    }
    if len(rule.destinations) == 1:
        out["destination_address_prefix"] = rule.destinations[0]
    else:
        out["destination_address_prefixes"] = list(rule.destinations)
    if len(rule.sources) == 1:
        out["source_address_prefix"] = rule.sources[0]
    else:
        out["source_address_prefixes"] = list(rule.sources)
    return out


class Network(pulumi.ComponentResource):
    subnet_ids: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, ctx: Context, dns_resolver: bool = False, opts: pulumi.ResourceOptions | None = None):
        """`dns_resolver`: add the delegated subnet of the DNS Private Resolver (see `dns`)."""
        super().__init__("skyrack:azure:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        plan, prefix = ctx.plan, ctx.prefix

        nat_ip = network.PublicIPAddress(
            "nat-ip", public_ip_address_name=f"{prefix}-nat", sku={"name": "Standard"},
            public_ip_allocation_method="Static", **ctx.common(), opts=child)
        self.nat = network.NatGateway(
            "nat", nat_gateway_name=f"{prefix}-nat", sku={"name": "Standard"},
            public_ip_addresses=[{"id": nat_ip.id}], idle_timeout_in_minutes=10, **ctx.common(), opts=child)

        self.nsgs = {
            nsg: network.NetworkSecurityGroup(
                f"nsg-{nsg}", network_security_group_name=f"{prefix}-{nsg}",
                security_rules=[security_rule(r) for r in nsg_rules], **ctx.common(), opts=child)
            for nsg, nsg_rules in rules.nsg_rules(plan).items()
        }

        routes = pod_routes(plan)
        self.route_table = network.RouteTable(
            ROUTE_TABLE, route_table_name=f"{prefix}-{ROUTE_TABLE}", routes=routes,
            # the gateway's subnet must keep the routes BGP learns (on-prem's ranges)
            disable_bgp_route_propagation=False, **ctx.common(), opts=child) if routes else None
        subnets = []
        layout = subnet_layout(ctx, dns_resolver)
        for subnet, cidr in layout.items():
            spec: dict[str, object] = {"name": subnet, "address_prefix": cidr}
            nsg = rules.subnet_nsg(subnet)
            if subnet == dns.SUBNET:
                spec["delegations"] = [{"name": "dns-resolver", "service_name": dns.DELEGATION}]
            elif nsg is not None:
                spec["network_security_group"] = {"id": self.nsgs[nsg].id}
                spec["nat_gateway"] = {"id": self.nat.id}
                spec["private_endpoint_network_policies"] = "Disabled"
            if self.route_table is not None and routed_subnet(subnet):
                spec["route_table"] = {"id": self.route_table.id}
            if subnet in ("etcd", "etcd-events"):
                spec["service_endpoints"] = [{"service": "Microsoft.Storage"}]  # snapshots, without the internet
            subnets.append(spec)
        self.vnet = network.VirtualNetwork(
            "vnet", virtual_network_name=prefix, address_space={"address_prefixes": plan.vnet_address_space},
            subnets=subnets, **ctx.common(), opts=child)
        self.subnet_ids = {s: pulumi.Output.concat(self.vnet.id, "/subnets/", s) for s in layout}

        self.dns_zone = privatedns.PrivateZone(
            "dns-zone", private_zone_name=plan.env.dns_zone, location="Global",
            resource_group_name=ctx.resource_group, tags=ctx.tags, opts=child)
        privatedns.VirtualNetworkLink(
            "dns-link", virtual_network_link_name=prefix, private_zone_name=self.dns_zone.name,
            location="Global", registration_enabled=False, virtual_network={"id": self.vnet.id},
            resource_group_name=ctx.resource_group, tags=ctx.tags, opts=child)
        records = [(m.name, m.ip) for m in plan.members] + [(certs.API_RECORD, plan.apiserver_lb_ip)]
        for record, ip in records:
            privatedns.PrivateRecordSet(
                f"dns-{record}", private_zone_name=self.dns_zone.name, record_type="A",
                relative_record_set_name=record, ttl=300, a_records=[{"ipv4_address": ip}],
                resource_group_name=ctx.resource_group, opts=child)
        self.register_outputs({"vnet_id": self.vnet.id})
