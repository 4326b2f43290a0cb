"""Azure resources of a Pulumi preview turned into what `rules` reasons about.

Reads the inputs of `azure-native` network resources (as the policy pack receives
them: camelCase property dicts) and returns subnets and `Grant`s. The standard
library only, so the policy pack needs nothing but `pulumi-policy` besides.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from .rules import ALL_PORTS, INTERNET, Grant, apiserver_exposure, etcd_exposure

NSG = "azure-native:network:NetworkSecurityGroup"
SECURITY_RULE = "azure-native:network:SecurityRule"
SUBNET = "azure-native:network:Subnet"
VNET = "azure-native:network:VirtualNetwork"
CONTROL_PLANE_SUBNETS = ("apiservers", "etcd", "etcd-events")  # the names plan.subnets uses
ETCD_SUBNETS = ("etcd", "etcd-events")
_PUBLIC_TAGS = {"*", "any", "internet", "0.0.0.0/0"}

Resource = tuple[str, str, Mapping[str, Any]]  # (type, name, props)


def prefix(text: str) -> ipaddress.IPv4Network | None:
    """An address prefix or service tag; None for tags that are not the internet."""
    if text.strip().lower() in _PUBLIC_TAGS:
        return INTERNET
    try:
        return ipaddress.IPv4Network(text.strip(), strict=False)
    except ValueError:
        return None  # VirtualNetwork, AzureLoadBalancer, ...: local, but not the control plane


def ports(values: Iterable[str]) -> tuple[tuple[int, int], ...]:
    out = []
    for v in values:
        v = str(v).strip()
        if v in ("*", ""):
            return ALL_PORTS
        lo, _, hi = v.partition("-")
        out.append((int(lo), int(hi or lo)))
    return tuple(out)


def _many(props: Mapping[str, Any], one: str, many: str) -> list[str]:
    values = list(props.get(many) or [])
    if props.get(one):
        values.append(props[one])
    return [str(v) for v in values]


def rule_grants(label: str, props: Mapping[str, Any]) -> list[Grant]:
    """The grants of one security rule (only inbound Allow rules admit anything)."""
    if str(props.get("direction", "")).lower() != "inbound" or str(props.get("access", "")).lower() != "allow":
        return []
    dests = [prefix(d) for d in _many(props, "destinationAddressPrefix", "destinationAddressPrefixes")] or [None]
    port_ranges = ports(_many(props, "destinationPortRange", "destinationPortRanges")) or ALL_PORTS
    name = f"{label}/{props.get('name', '?')}"
    return [Grant(name, prefix(s), d, port_ranges)
            for s in _many(props, "sourceAddressPrefix", "sourceAddressPrefixes") for d in dests]


def grants(resources: Iterable[Resource]) -> list[Grant]:
    out: list[Grant] = []
    for type_, name, props in resources:
        if type_ == NSG:
            for r in props.get("securityRules") or []:
                out += rule_grants(name, r)
        elif type_ == SECURITY_RULE:
            out += rule_grants(name, {"name": props.get("securityRuleName", name), **props})
    return out


def subnets(resources: Iterable[Resource]) -> dict[str, ipaddress.IPv4Network]:
    """Subnets by name, from Subnet resources and subnets inlined in a VirtualNetwork."""
    out: dict[str, ipaddress.IPv4Network] = {}
    for type_, name, props in resources:
        found = (props.get("subnets") or []) if type_ == VNET else [props] if type_ == SUBNET else []
        for s in found:
            label = s.get("subnetName") or s.get("name") or name
            cidr = s.get("addressPrefix")
            if cidr:
                out[str(label)] = ipaddress.IPv4Network(str(cidr), strict=False)
    return out


# ----------------------------------------------------------------------------- the pack's checks


def apiserver_violations(type_: str, name: str, props: Mapping[str, Any]) -> list[str]:
    """One resource: does a security rule open the API server port to the internet?"""
    return apiserver_exposure(grants([(type_, name, props)]))


def etcd_violations(resources: Iterable[Resource]) -> list[str]:
    """The whole stack: can anything outside the control-plane subnets reach etcd?"""
    resources = list(resources)
    nets = subnets(resources)
    etcd = [nets[n] for n in ETCD_SUBNETS if n in nets]
    if not etcd:
        return []
    return etcd_exposure(grants(resources), etcd, [nets[n] for n in CONTROL_PLANE_SUBNETS if n in nets])
