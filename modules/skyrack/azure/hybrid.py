"""The hybrid link: a route-based VPN gateway, the on-prem side and the IPsec connection.

The local network gateway announces what lives on-prem: `onprem.cidrs` (the nodes), the
on-prem pod ranges from the plan (`Plan.onprem_pod_ranges`, summarised), so pods in Azure
reach pods on-prem without NAT, and the operator networks (`azure.operator_cidrs`) not
already inside them, so the API servers' replies to operators go back over the tunnel.
With `onprem.vpn.asn` the connection runs BGP (Azure's side uses its default ASN 65515)
and on-prem learns the VNet, including the cloud pools' pod ranges, without static
routes: Azure peers with the device's private `bgp_peer_ip`, whose /32 must be in the
local gateway's prefixes, and the device peers with the gateway's own BGP address
(exported as `bgp_peering_address`). The pre-shared key is a Pulumi secret, from stack
config `skyrack:vpnSharedKey` or generated once.
"""

from __future__ import annotations

import ipaddress

import pulumi
from pulumi_azure_native import network

from ..plan import Plan
from .context import Context

AZURE_ASN = 65515
GATEWAY_SKU = "VpnGw2AZ"  # zone-redundant; ~1.25 Gbit/s of IPsec, enough for control-plane and pod traffic


def onprem_prefixes(plan: Plan) -> list[str]:
    """What Azure routes to the VPN: on-prem nodes and pods, operator networks, the BGP peer's /32."""
    env = plan.env
    routed = [*env.onprem.cidrs, *(ipaddress.ip_network(r) for r in plan.onprem_pod_ranges)]
    out = [str(c) for c in routed]
    out += [str(c) for c in env.azure.operator_networks if not any(c.subnet_of(r) for r in routed)]
    vpn = env.onprem.vpn
    if vpn is not None and vpn.bgp_peer_ip is not None:
        out.append(f"{vpn.bgp_peer_ip}/32")
    return out


class HybridLink(pulumi.ComponentResource):
    def __init__(self, name: str, ctx: Context, gateway_subnet_id: pulumi.Input[str],
                 shared_key: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None):
        super().__init__("skyrack:azure:HybridLink", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        env, prefix = ctx.plan.env, ctx.prefix
        vpn = env.onprem.vpn
        if vpn is None:
            raise ValueError("HybridLink needs onprem.vpn")
        bgp = vpn.asn is not None

        ip = network.PublicIPAddress(
            "vpn-ip", public_ip_address_name=f"{prefix}-vpn", sku={"name": "Standard"},
            public_ip_allocation_method="Static", zones=list(env.azure.zones) or None, **ctx.common(), opts=child)
        self.gateway = network.VirtualNetworkGateway(
            "vpn-gateway", virtual_network_gateway_name=f"{prefix}-vpn", gateway_type="Vpn", vpn_type="RouteBased",
            vpn_gateway_generation="Generation2", sku={"name": GATEWAY_SKU, "tier": GATEWAY_SKU},
            active_active=False, enable_bgp=bgp, bgp_settings={"asn": AZURE_ASN} if bgp else None,
            ip_configurations=[{"name": "default", "private_ip_allocation_method": "Dynamic",
                                "subnet": {"id": gateway_subnet_id}, "public_ip_address": {"id": ip.id}}],
            **ctx.common(), opts=child)
        bgp_settings = None
        if bgp:
            # The environment file requires bgp_peer_ip with asn: a private address inside the tunnel.
            bgp_settings = {"asn": vpn.asn, "bgp_peering_address": str(vpn.bgp_peer_ip)}
        self.local_gateway = network.LocalNetworkGateway(
            "onprem-gateway", local_network_gateway_name=f"{prefix}-onprem", gateway_ip_address=str(vpn.peer_ip),
            local_network_address_space={"address_prefixes": onprem_prefixes(ctx.plan)}, bgp_settings=bgp_settings,
            **ctx.common(), opts=child)
        self.connection = network.VirtualNetworkGatewayConnection(
            "onprem-connection", virtual_network_gateway_connection_name=f"{prefix}-onprem",
            connection_type="IPsec", connection_protocol="IKEv2", enable_bgp=bgp, shared_key=shared_key,
            virtual_network_gateway1={"id": self.gateway.id}, local_network_gateway2={"id": self.local_gateway.id},
            **ctx.common(), opts=child)
        self.public_ip: pulumi.Output[str] = ip.ip_address.apply(lambda a: a or "")
        # What the on-prem device peers with: the gateway's BGP address in GatewaySubnet (None without BGP).
        self.bgp_peering_address: pulumi.Output[str | None] = self.gateway.bgp_settings.apply(
            lambda b: (b.bgp_peering_address if b else None) if bgp else None)
        self.register_outputs({"public_ip": self.public_ip, "bgp_peering_address": self.bgp_peering_address})
