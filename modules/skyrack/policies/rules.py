"""The rule logic shared by `skyrack check` and the Pulumi policy pack.

Pure functions on networks, ports and versions; the standard library only. Each
returns what is wrong in words an operator can act on (empty when all is well).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

IPv4Net = ipaddress.IPv4Network

APISERVER_PORT = 6443
ETCD_PORTS = (2379, 2380)  # client, peer
# The broadest public range that may reach the API server: a /16 is a campus; anything
# broader is "the internet" for practical purposes.
BROADEST_PUBLIC_PREFIX = 16
# The Kubernetes minor versions (1.x) skyrack is built and tested for. The one place
# this window is defined: `skyrack check` and `skyrack diff` both read it.
KUBERNETES_MINORS = (30, 32)
INTERNET = ipaddress.IPv4Network("0.0.0.0/0")
ALL_PORTS = ((0, 65535),)


@dataclass(frozen=True)
class Grant:
    """Inbound traffic a network rule admits.

    `source`/`destination` None stands for a service tag such as `VirtualNetwork`,
    which covers networks outside the control plane (VPN and peered networks too).
    """

    label: str
    source: IPv4Net | None
    destination: IPv4Net | None
    ports: tuple[tuple[int, int], ...] = ALL_PORTS

    def reaches_port(self, port: int) -> bool:
        return any(lo <= port <= hi for lo, hi in self.ports)


def public_exposure(net: IPv4Net) -> str | None:
    """Why admitting `net` opens a service to the internet, or None."""
    if net.prefixlen == 0:
        return f"{net} is the whole internet"
    if net.is_global and net.prefixlen < BROADEST_PUBLIC_PREFIX:
        return (f"{net} is a public range of {net.num_addresses:,} addresses "
                f"(broader than /{BROADEST_PUBLIC_PREFIX})")
    return None


def apiserver_exposure(grants: Iterable[Grant]) -> list[str]:
    """Grants that open the API server port to the internet."""
    out = []
    for g in grants:
        why = public_exposure(g.source) if g.source is not None else None
        if why and g.reaches_port(APISERVER_PORT):
            out.append(f"{g.label} admits {g.source} to the API server (port {APISERVER_PORT}): {why}")
    return out


def etcd_exposure(grants: Iterable[Grant], etcd_nets: Iterable[IPv4Net],
                  control_plane_nets: Iterable[IPv4Net]) -> list[str]:
    """Grants through which something outside the control plane could reach etcd.

    A source inside a control-plane subnet is fine. Any other source must neither
    contain an etcd subnet (rules admitting it would then admit etcd's own addresses)
    nor be admitted to an etcd subnet on the etcd ports.
    """
    etcd = list(etcd_nets)
    inside = list(control_plane_nets)
    out = []
    for g in grants:
        if g.source is not None and any(g.source.subnet_of(c) for c in inside):
            continue
        source = str(g.source) if g.source is not None else "a service tag"
        hit = [e for e in etcd if g.source is not None and g.source.overlaps(e)]
        if hit:
            out.append(f"{g.label} ({source}) includes the etcd subnet {hit[0]}")
            continue
        ports = [p for p in ETCD_PORTS if g.reaches_port(p)]
        reached = [e for e in etcd if g.destination is None or g.destination.overlaps(e)]
        if ports and reached:
            out.append(f"{g.label} admits {source} to etcd ({reached[0]}, port {ports[0]})")
    return out


def kubernetes_version_problem(version: str) -> str | None:
    """Why a Kubernetes version is outside the supported window, or None."""
    lo, hi = KUBERNETES_MINORS
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return f"{version!r} is not a Kubernetes version (1.MINOR.PATCH)"
    if major != 1 or not lo <= minor <= hi:
        return f"{version} is outside the supported window 1.{lo} to 1.{hi}"
    return None

