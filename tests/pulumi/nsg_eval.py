"""Evaluate Azure NSG rules the way Azure does, on the inputs the program registered.

Inbound rules are tried in priority order, first match wins; after the custom rules
come Azure's defaults: AllowVnetInBound (65000: source and destination in the
VirtualNetwork tag, which covers the VNet's address space *and* every prefix reached
through its VPN gateway), AllowAzureLoadBalancerInBound (65001), DenyAllInBound (65500).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

AZURE_LB_PROBE = "168.63.129.16"


@dataclass(frozen=True)
class Network:
    virtual_network: list[str]  # prefixes in the VirtualNetwork tag

    def in_tag(self, tag: str, ip: str) -> bool:
        addr = ipaddress.ip_address(ip)
        if tag == "*":
            return True
        if tag == "VirtualNetwork":
            return any(addr in ipaddress.ip_network(p) for p in self.virtual_network)
        if tag == "AzureLoadBalancer":
            return ip == AZURE_LB_PROBE
        if tag[0].isdigit():
            return addr in ipaddress.ip_network(tag)
        raise ValueError(f"unknown service tag {tag}")


def _port_matches(spec: str, port: int) -> bool:
    if spec == "*":
        return True
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo) <= port <= int(hi)
    return int(spec) == port


def allows(rules: list[dict], net: Network, src: str, dst: str, port: int, protocol: str = "Tcp") -> bool:
    """Would an inbound TCP connection from `src` to `dst:port` pass an NSG with `rules` (registered inputs)?"""
    defaults = [
        {"priority": 65000, "access": "Allow", "protocol": "*", "sourceAddressPrefix": "VirtualNetwork",
         "destinationAddressPrefix": "VirtualNetwork", "destinationPortRange": "*", "direction": "Inbound"},
        {"priority": 65001, "access": "Allow", "protocol": "*", "sourceAddressPrefix": "AzureLoadBalancer",
         "destinationAddressPrefix": "*", "destinationPortRange": "*", "direction": "Inbound"},
        {"priority": 65500, "access": "Deny", "protocol": "*", "sourceAddressPrefix": "*",
         "destinationAddressPrefix": "*", "destinationPortRange": "*", "direction": "Inbound"},
    ]
    for rule in sorted([*rules, *defaults], key=lambda r: r["priority"]):
        if rule.get("direction", "Inbound") != "Inbound" or rule["protocol"] not in ("*", protocol):
            continue
        sources = rule.get("sourceAddressPrefixes") or [rule["sourceAddressPrefix"]]
        dests = rule.get("destinationAddressPrefixes") or [rule["destinationAddressPrefix"]]
        ports = rule.get("destinationPortRanges") or [rule["destinationPortRange"]]
        if (any(net.in_tag(s, src) for s in sources) and any(net.in_tag(d, dst) for d in dests)
                and any(_port_matches(p, port) for p in ports)):
            return rule["access"] == "Allow"
    raise AssertionError("unreachable: DenyAllInBound matches everything")
