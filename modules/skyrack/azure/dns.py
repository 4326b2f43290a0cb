"""On-prem names from Azure: a DNS Private Resolver forwarding the on-prem zones over the VPN.

Production's mirrors (`mirrors.apt_proxy`, `.kubernetes`, `.registry`) are names that only
the site's DNS servers know (`apt-proxy.lab.internal`). Azure's resolver (168.63.129.16,
what every VM asks) cannot answer them, so without this a control-plane VM's first boot
fails at `apt-get update`. The resolver's outbound endpoint sits in the delegated subnet
`dns-resolver`; a forwarding ruleset linked to the VNet sends each on-prem domain to the
on-prem DNS servers (stack config `skyrack:onpremDnsServers`), through the VPN; every other
name, the private zone `<env>.skyrack.internal` included, is still answered by Azure.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

import pulumi
from pulumi_azure_native import dnsresolver

from ..config import Environment
from ..config.semantics import MIRROR_FIELDS, PRIVATE_SUFFIXES
from .context import Context

SUBNET = "dns-resolver"
DELEGATION = "Microsoft.Network/dnsResolvers"


@dataclass(frozen=True)
class Forwarding:
    domains: tuple[str, ...]  # fully qualified, with the trailing dot Azure wants
    servers: tuple[str, ...]  # on-prem DNS servers, reached over the VPN


def mirror_hosts(env: Environment) -> list[tuple[str, str]]:
    """(field, host name) of every mirror given by name, not by address."""
    out = []
    for field in MIRROR_FIELDS:
        url = getattr(env.mirrors, field)
        host = urlsplit(url).hostname if url else None
        if host:
            try:
                ipaddress.ip_address(host)
            except ValueError:
                out.append((f"mirrors.{field}", host))
    return out


def onprem_domains(env: Environment) -> list[str]:
    """The domains to forward: the parent domain of each mirror name under a private suffix."""
    domains = {host.split(".", 1)[1] + "." for _, host in mirror_hosts(env)
               if "." in host and host.endswith(PRIVATE_SUFFIXES)}
    return sorted(domains)


class DnsForwarder(pulumi.ComponentResource):
    def __init__(self, name: str, ctx: Context, vnet_id: pulumi.Input[str], subnet_id: pulumi.Input[str],
                 forwarding: Forwarding, opts: pulumi.ResourceOptions | None = None):
        super().__init__("skyrack:azure:DnsForwarder", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        prefix = ctx.prefix
        resolver = dnsresolver.DnsResolver(
            "dns-resolver", dns_resolver_name=f"{prefix}-dns", virtual_network={"id": vnet_id},
            **ctx.common(), opts=child)
        outbound = dnsresolver.OutboundEndpoint(
            "dns-outbound", outbound_endpoint_name="onprem", dns_resolver_name=resolver.name,
            subnet={"id": subnet_id}, **ctx.common(), opts=child)
        ruleset = dnsresolver.DnsForwardingRuleset(
            "dns-ruleset", dns_forwarding_ruleset_name=f"{prefix}-onprem",
            dns_resolver_outbound_endpoints=[{"id": outbound.id}], **ctx.common(), opts=child)
        for i, domain in enumerate(forwarding.domains):
            dnsresolver.ForwardingRule(
                f"dns-forward-{domain.rstrip('.').replace('.', '-')}", forwarding_rule_name=f"onprem-{i}",
                dns_forwarding_ruleset_name=ruleset.name, domain_name=domain, forwarding_rule_state="Enabled",
                target_dns_servers=[{"ip_address": s, "port": 53} for s in forwarding.servers],
                resource_group_name=ctx.resource_group, opts=child)
        # What a VM's first boot waits for: names resolve once the ruleset is linked to the VNet.
        self.link = dnsresolver.PrivateResolverVirtualNetworkLink(
            "dns-ruleset-link", virtual_network_link_name=prefix, dns_forwarding_ruleset_name=ruleset.name,
            virtual_network={"id": vnet_id}, resource_group_name=ctx.resource_group, opts=child)
        self.register_outputs({"domains": list(forwarding.domains)})
