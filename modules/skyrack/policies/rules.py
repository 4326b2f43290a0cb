"""The rule logic shared by `skyrack check` and the Pulumi policy pack.

Pure functions on networks, ports and versions; the standard library only. Each
returns what is wrong in words an operator can act on (empty when all is well).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

IPv4Net = ipaddress.IPv4Network

APISERVER_PORT = 6443
ETCD_PORTS = (2379, 2380)  # client, peer
# The broadest public range that may reach the API server: a /16 is a campus; anything
# broader is "the internet" for practical purposes.
BROADEST_PUBLIC_PREFIX = 16
INTERNET = ipaddress.IPv4Network("0.0.0.0/0")
ALL_PORTS = ((0, 65535),)
# How long before a minor's end of life `skyrack check` warns: time to plan the upgrade.
EOL_WARNING_DAYS = 60


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


@dataclass(frozen=True)
class KubernetesRelease:
    """One Kubernetes minor (1.`minor`) in upstream's release calendar.

    `end_of_life` is the last day of patch support (upstream's "End of Life" date): the
    minor is supported from `released` through `end_of_life`, both included. None: not
    released yet / no end of life announced.
    """

    minor: int
    released: dt.date | None
    end_of_life: dt.date | None

    def supported_on(self, day: dt.date) -> bool:
        return (self.released is not None and self.released <= day
                and (self.end_of_life is None or day <= self.end_of_life))


# Upstream's release calendar (kubernetes.io/releases and /releases/patch-releases): each
# minor gets about 14 months of patches. The one place it is defined: the rule
# `kubernetes-version-supported` of `skyrack check` (and so the review workflow) reads it.
# A new minor is one line here, its dates from those pages.
KUBERNETES_RELEASES: dict[int, KubernetesRelease] = {r.minor: r for r in (
    KubernetesRelease(30, dt.date(2024, 4, 17), dt.date(2025, 6, 28)),
    KubernetesRelease(31, dt.date(2024, 8, 13), dt.date(2025, 10, 28)),
    KubernetesRelease(32, dt.date(2024, 12, 11), dt.date(2026, 2, 28)),
    KubernetesRelease(33, dt.date(2025, 4, 23), dt.date(2026, 6, 28)),
    KubernetesRelease(34, dt.date(2025, 8, 27), dt.date(2026, 10, 27)),
    KubernetesRelease(35, dt.date(2025, 12, 17), dt.date(2027, 2, 28)),
    KubernetesRelease(36, dt.date(2026, 4, 22), dt.date(2027, 6, 28)),
    # release and end of life: the dates upstream's release schedule planned
    KubernetesRelease(37, dt.date(2026, 8, 19), dt.date(2027, 10, 28)),
    # planned for 2026-12, not released: no date until upstream publishes the release
    KubernetesRelease(38, None, None),
)}


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def newest_supported_minor(today: dt.date) -> KubernetesRelease | None:
    """The newest minor in upstream support on `today`: the one to move to."""
    supported = [r for r in KUBERNETES_RELEASES.values() if r.supported_on(today)]
    return max(supported, key=lambda r: r.minor, default=None)


@dataclass(frozen=True)
class VersionProblem:
    message: str
    unsupported: bool  # False: still supported, but its end of life is near (plan the upgrade)


def kubernetes_version_problem(version: str, today: dt.date | None = None) -> VersionProblem | None:
    """Why a Kubernetes version is not (or soon no longer) supported upstream on `today`, or None.

    Unsupported: a minor past its end of life, not released yet, or not in
    `KUBERNETES_RELEASES`. A supported minor whose end of life is at most
    `EOL_WARNING_DAYS` away is a problem too, with `unsupported` False.
    `today` defaults to today's UTC date.
    """
    day = today or utc_today()
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return VersionProblem(f"{version!r} is not a Kubernetes version (1.MINOR.PATCH)", True)
    target = newest_supported_minor(day)
    if target is None:
        move = (f"no minor in skyrack's release table is supported on {day}: add upstream's newer minors "
                "to KUBERNETES_RELEASES (policies/rules.py)")
    else:
        until = f", until {target.end_of_life}" if target.end_of_life else ""
        move = f"move to 1.{target.minor} (the newest minor in support{until})"
    known = KUBERNETES_RELEASES.get(minor) if major == 1 else None
    if known is None:
        first, last = min(KUBERNETES_RELEASES), max(KUBERNETES_RELEASES)
        return VersionProblem(f"{version}: Kubernetes {major}.{minor} is not in skyrack's release table "
                              f"(1.{first} to 1.{last}), its support dates are unknown; {move}", True)
    if known.released is None or day < known.released:
        when = f"until {known.released}" if known.released else "yet"
        return VersionProblem(f"{version}: Kubernetes 1.{minor} is not released {when} (as of {day}); "
                              f"{move}", True)
    if known.end_of_life is None:
        return None  # released, no end of life announced: supported
    if day > known.end_of_life:
        return VersionProblem(f"{version}: Kubernetes 1.{minor} (released {known.released}) reached its end of "
                              f"life on {known.end_of_life}: no more patches, security fixes included; {move}", True)
    left = (known.end_of_life - day).days
    if left <= EOL_WARNING_DAYS:
        if target is None or target.minor <= minor:
            move = "no newer minor is released yet: watch for one"
        when = "today" if left == 0 else f"in {left} day(s)"
        return VersionProblem(f"{version}: Kubernetes 1.{minor} reaches its end of life on {known.end_of_life} "
                              f"({when}): plan the upgrade; {move}", False)
    return None
