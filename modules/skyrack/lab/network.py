"""The lab's network on the host: a bridge with the host's address, and rules that keep it local.

Nodes reach the host (SSH from Ansible, the apt proxy) and each other over the bridge.
Two `iptables -t mangle FORWARD` DROP rules make sure nothing from or to the lab's
addresses is ever forwarded through any other interface, whatever else the host's
firewall and `ip_forward` say. Every rule carries a comment naming the bridge.
"""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..plan import Plan

BENCHMARK_RANGE = "198.18.0.0/15"  # RFC 2544: the lab lives inside it


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def bridge_exists(bridge: str) -> bool:
    return Path(f"/sys/class/net/{bridge}").exists()


def ensure_bridge(bridge: str, host_ip: str, subnet: str, also: tuple[str, ...] = ()) -> None:
    """The bridge, up, with the host's address on the lab's subnet and each of `also` as a /32 (the API
    servers' load-balancer address, which the lab host serves: skyrack.lab.balancer)."""
    prefix = ipaddress.IPv4Network(subnet).prefixlen
    if not bridge_exists(bridge):
        _ip("link", "add", bridge, "type", "bridge")
    addrs = _ip("-o", "addr", "show", "dev", bridge).stdout
    for cidr in (f"{host_ip}/{prefix}", *(f"{ip}/32" for ip in also)):
        if f" {cidr} " not in addrs:
            _ip("addr", "add", cidr, "dev", bridge)
    _ip("link", "set", bridge, "up")


def fabric_routes(plan: Plan, name: str) -> list[tuple[str, str]]:
    """What stands in for the site's routers and Azure's route table: (pod range, next hop) for every other
    Kubernetes node's pod range that the node `name` does not route itself.

    In production an API server sends on-prem pod ranges to its default gateway (the VNet routes them over the
    VPN, the site to the rack) and a rack node sends an API server's range to its own (the site routes it into
    the VPN): docs/join.md. In the lab the default gateway is the lab host, which forwards nothing (this host's
    `ip_forward` is not the lab's to change), so without these the API server reaches no pod: no admission
    webhook, no aggregated API. A node's L2 segment peers are left out: its own skyrack-pod-routes (product
    code) routes those. Nothing for a host that is not a Kubernetes node."""
    segment = {r.name: r.l2_segment for r in plan.env.racks}
    kube = [(m.name, m.ip, m.pod_cidr, None) for m in plan.members if m.pod_cidr] + \
           [(n.name, n.ip, n.pod_cidr, segment[n.rack]) for n in plan.nodes]
    mine = next((k for k in kube if k[0] == name), None)
    if mine is None:
        return []
    return [(cidr, ip) for other, ip, cidr, seg in kube
            if other != name and not (seg is not None and seg == mine[3])]


def remove_bridge(bridge: str) -> None:
    if bridge_exists(bridge):
        _ip("link", "del", bridge)


def forward_rules(bridge: str, subnet: str = BENCHMARK_RANGE) -> list[list[str]]:
    """DROP the lab subnet's traffic on any other interface. With br_netfilter, frames bridged
    between two nodes pass FORWARD with -i/-o = the bridge: the ACCEPT (inserted last, so
    first in the chain) keeps another lab's broader DROP from cutting this lab's own traffic."""
    tag = ["-m", "comment", "--comment", f"skyrack lab {bridge}: never forward lab traffic off this host"]
    return [
        ["FORWARD", "-s", subnet, "!", "-o", bridge, "-j", "DROP", *tag],
        ["FORWARD", "-d", subnet, "!", "-i", bridge, "-j", "DROP", *tag],
        ["FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT", *tag],
    ]


def _iptables(op: str, rule: list[str]) -> int:
    return subprocess.run(["iptables", "-w", "-t", "mangle", op, *rule], capture_output=True, check=False).returncode


def ensure_rules(bridge: str, subnet: str = BENCHMARK_RANGE) -> list[list[str]]:
    rules = forward_rules(bridge, subnet)
    for rule in rules:
        if _iptables("-C", rule) != 0:
            # Insert at the top: the DROP must win over any ACCEPT already in the chain.
            if subprocess.run(["iptables", "-w", "-t", "mangle", "-I", rule[0], "1", *rule[1:]],
                              capture_output=True, text=True, check=False).returncode != 0:
                raise RuntimeError(f"cannot add iptables rule: {' '.join(rule)}")
    return rules


def rules_present(rules: list[list[str]]) -> bool:
    return all(_iptables("-C", r) == 0 for r in rules)


def remove_rules(rules: list[list[str]]) -> None:
    for rule in rules:
        while _iptables("-C", rule) == 0:
            _iptables("-D", rule)
