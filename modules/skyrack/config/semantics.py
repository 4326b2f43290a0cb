"""Rules that span fields of an environment: overlaps, duplicates, references, capacity, the lab's limits.

`semantic_problems` returns every violation as (path, message) pairs, in file order; `load`
runs it after the schema has passed.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from pathlib import Path

from .. import ipam, upstream
from ..errors import printable
from .schema import DNS_LABEL, MAX_NODES, Environment, IPv4Addr


def file_name_problem(env_name: str, file_name: str) -> str | None:
    """An environment file is named exactly `<name>.yaml`: its lock file and its stacks are named after it."""
    stem, suffix = (file_name[:-5], ".yaml") if file_name.endswith(".yaml") else (Path(file_name).stem, "")
    if stem != env_name:
        return (f"{env_name!r} does not match the file name {printable(stem)!r} (the stack and the lock file are named "
                f"after the environment: name the file {env_name}.yaml)")
    if not suffix:
        return f"an environment file is named {env_name}.yaml, not {printable(file_name)!r}"
    return None


def semantic_problems(env: Environment, file_name: str | None = None, builds: bool = True) -> list[tuple[str, str]]:
    """Rules that span fields. Returns (path, message) pairs, all of them, in file order.

    `file_name`: the file's name (`dev.yaml`), which must be `<name>.yaml`. `builds`: a lab's versions must
    be ones this code builds (skyrack.upstream); off for another revision's file (`skyrack diff`'s base)."""
    out: list[tuple[str, str]] = []
    if file_name is not None:
        problem = file_name_problem(env.name, file_name)
        if problem:
            out.append(("name", problem))

    nets = [("azure.vnet_cidr", env.azure.vnet_cidr), ("kubernetes.service_cidr", env.kubernetes.service_cidr),
            ("kubernetes.pod_cidr", env.kubernetes.pod_cidr)]
    nets += [(f"onprem.cidrs[{i}]", c) for i, c in enumerate(env.onprem.cidrs)]
    for i, (pa, a) in enumerate(nets):
        for pb, b in nets[:i]:
            if a.overlaps(b):
                out.append((pa, f"{a} overlaps {pb} ({b})"))

    out.extend(_mirror_trust_problems(env))
    teams = {}
    for i, team in enumerate(env.teams):
        if team.name in teams:
            out.append((f"teams[{i}].name", f"team {team.name!r} is already defined at teams[{teams[team.name]}]"))
        teams.setdefault(team.name, i)
    _dupes(out, "cloud_pools", [p.name for p in env.cloud_pools], "pool")
    _dupes(out, "racks", [r.name for r in env.racks], "rack")

    if env.execution is not None:
        racks = [r.name for r in env.racks]
        served: dict[str, str] = {}
        _dupes(out, "execution.nodes", [x.name for x in env.execution.nodes], "execution node")
        if env.execution.controller is not None and not 0 < int(env.execution.controller.rsplit(":", 1)[1]) < 65536:
            out.append(("execution.controller", f"{env.execution.controller!r}: the port must be 1-65535"))
        for xi, x in enumerate(env.execution.nodes):
            for ki, r in enumerate(x.racks):
                if r not in racks:
                    out.append((f"execution.nodes[{xi}].racks[{ki}]", f"unknown rack {r!r} (racks: {', '.join(racks)})"))
                elif r in served:
                    out.append((f"execution.nodes[{xi}].racks[{ki}]", f"rack {r!r} is already served by {served[r]}"))
                served.setdefault(r, x.name)

    for ri, rack in enumerate(env.racks):
        if rack.team is not None and rack.team not in teams:
            known = ", ".join(teams) or "none are defined"
            out.append((f"racks[{ri}].team", f"unknown team {rack.team!r} (teams: {known})"))
        if rack.node_range is not None:
            last = int(rack.node_range.first_ip) + rack.node_range.count - 1
            if last > int(ipaddress.IPv4Address("255.255.255.255")):
                out.append((f"racks[{ri}].node_range.count", "the range runs past 255.255.255.255"))
                return out
    total = sum(len(r.nodes) + (r.node_range.count if r.node_range else 0) for r in env.racks)
    if total > MAX_NODES:
        out.append(("racks", f"{total:,} on-prem nodes: more than the {MAX_NODES:,} one environment may have"))
        return out  # not expanded: the checks below would cost as much as the nodes

    names: dict[str, str] = {}
    ips: dict[IPv4Addr, str] = {}
    label_re = re.compile(DNS_LABEL)  # fullmatch: a trailing newline is not a label
    onprem = env.onprem.cidrs
    for _rack, node, where in env.rack_nodes:
        if node.name in names:
            out.append((f"{where}.name", f"{node.name} is already used by {names[node.name]}"))
        else:
            names[node.name] = where
        if not label_re.fullmatch(node.name):
            out.append((f"{where}.name", f"{printable(node.name)!r} is not a DNS-1123 label"))
        if node.ip in ips:
            out.append((f"{where}.ip", f"{node.ip} is already used by {ips[node.ip]}"))
        else:
            ips[node.ip] = where
        if not any(node.ip in c for c in onprem):
            out.append((f"{where}.ip", f"{node.ip} is outside onprem.cidrs ({', '.join(map(str, onprem))})"))
        elif any(node.ip in (c.network_address, c.broadcast_address) for c in onprem if node.ip in c):
            out.append((f"{where}.ip", f"{node.ip} is the network or broadcast address of its on-prem CIDR"))

    need = env.node_count
    have = ipam.block_capacity(env.kubernetes.pod_cidr, env.kubernetes.pods_per_node)
    if need > have:
        block = ipam.block_prefix(env.kubernetes.pods_per_node)
        out.append(("kubernetes.pod_cidr",
                    f"{env.kubernetes.pod_cidr} holds {have} /{block} node ranges but {need} nodes need one "
                    f"({len(env.rack_nodes)} on-prem + {env.cloud_max_nodes} cloud pool maximum)"))
    vnet_problem = ipam.vnet_problem(env.azure.vnet_cidr)
    if vnet_problem:
        out.append(("azure.vnet_cidr", vnet_problem))
    if env.lab is not None:
        out.extend(_lab_problems(env, builds))
    out.extend(_cluster_problems(env))
    return out


MIRROR_FIELDS = ("apt_proxy", "kubernetes", "registry")
# Suffixes no public DNS answers and no public CA certifies (RFC 6762 .local, RFC 8375 .home.arpa, ICANN's
# reserved .internal, common site habits): Azure forwards them on-prem (azure/dns.py), and an HTTPS mirror
# under one has a certificate from the site's own CA.
PRIVATE_SUFFIXES = (".internal", ".local", ".lan", ".home.arpa", ".corp", ".intranet", ".private", ".localdomain")


def private_name(host: str) -> bool:
    """Whether a mirror's host can only carry a certificate of the site's own CA: an IP address, a single
    label, or a name under a private suffix."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return "." not in host or host.endswith(PRIVATE_SUFFIXES)


def _mirror_trust_problems(env: Environment) -> list[tuple[str, str]]:
    """An HTTPS mirror whose certificate no public CA can have needs `mirrors.ca`, or every fetch fails."""
    out = []
    for field in MIRROR_FIELDS:
        url = getattr(env.mirrors, field)
        parts = urllib.parse.urlsplit(url or "")
        if parts.scheme == "https" and env.mirrors.ca is None and private_name(parts.hostname or ""):
            out.append((f"mirrors.{field}", f"{url}: {parts.hostname} can only have a certificate from the site's "
                                            "own CA, and mirrors.ca is not set: set it to that CA (PEM text or a "
                                            "file), or every node refuses the mirror"))
    return out


def _dupes(out: list[tuple[str, str]], field: str, names: list[str], what: str) -> None:
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            out.append((f"{field}[{i}].name", f"{what} {name!r} is already defined at {field}[{first[name]}]"))
        first.setdefault(name, i)


def _lab_problems(env: Environment, builds: bool = True) -> list[tuple[str, str]]:
    assert env.lab is not None
    subnet = env.lab.subnet
    out = []
    if not env.azure.vnet_cidr.subnet_of(subnet):
        out.append(("azure.vnet_cidr", f"in a lab the control plane must live on the lab subnet {subnet}"))
    for i, c in enumerate(env.onprem.cidrs):
        if not c.subnet_of(subnet):
            out.append((f"onprem.cidrs[{i}]", f"in a lab the racks must live on the lab subnet {subnet}"))
    if env.cloud_pools:
        out.append(("cloud_pools", "a lab has no cloud pools (there is no Azure to scale)"))
    build = upstream.KUBERNETES_BUILDS.get(env.kubernetes.version)
    if not builds:
        pass  # another revision's file: its own code decided what it builds
    elif build is None:
        out.append(("kubernetes.version", f"{env.kubernetes.version} is not a version the lab builds from source "
                                          f"(known to build: {upstream.known_versions()})"))
    elif env.mirrors.kubernetes is not None:  # the lab builds and serves these images itself
        built = build.images()
        for fld, image in (("coredns", built["coredns"]), ("pause", built["pause"]),
                           ("prometheus", built["prometheus"])):
            if getattr(env.cluster.versions, fld) != image:
                out.append((f"cluster.versions.{fld}", f"the lab builds {image} for Kubernetes "
                                                       f"{env.kubernetes.version}; set that"))
        for fld, have, built_version in (("kubernetes.containerd", env.kubernetes.containerd, upstream.CONTAINERD_VERSION),
                                         ("control_plane.etcd.version", env.control_plane.etcd.version,
                                          upstream.ETCD_VERSION)):
            if have != built_version.lstrip("v"):
                out.append((fld, f"the lab builds {built_version.lstrip('v')}, not {have}; set that"))
    for _rack, node, where in env.rack_nodes:
        if node.ip == env.lab.host_ip:
            out.append((f"{where}.ip", f"{node.ip} is the lab host's own address on the bridge"))
    return out


def _cluster_problems(env: Environment) -> list[tuple[str, str]]:
    known = [t.name for t in env.teams]
    return [(f"cluster.teams.{name}", f"unknown team {name!r} (teams: {', '.join(known) or 'none are defined'})")
            for name in env.cluster.teams if name not in known]
