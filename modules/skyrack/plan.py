"""The plan: everything derived from a validated environment, for every consumer.

Pulumi components, the Ansible inventory and the rendered files all read a `Plan`;
none of them re-derives an address, a size or a label. Building a plan is pure: the
only state it reads is the lock file (`configs/<env>.lock.yaml`) that pins pod ranges,
and `write_lock` is the only function here that writes.

The lock is input like any other: `read_lock` refuses duplicate keys and anything but the
shape `write_lock` writes, and `verify_lock` checks it against the environment (every range
a node-sized block inside `pod_cidr`, no two ranges overlapping, pools apart from nodes)
before any consumer uses it. Writes are atomic (a unique temporary file, fsync, rename,
under an advisory lock on the directory) and leave nothing behind when they fail.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import config, files, ipam, sizing, tuning
from .errors import InputError, Problem, printable

IPv4Net = ipaddress.IPv4Network

LOCK_VERSION = 1
LOCK_KEYS = ("version", "pod_cidr", "block_prefix", "pools", "apiservers", "nodes", "leaving")
RANGE_KEYS = ("pools", "apiservers", "nodes", "leaving")  # the lock's mappings of name to pod range
MAX_LOCK_BYTES = 32 << 20
ROLES = ("apiserver", "etcd", "etcd-events")

# Label and taint keys: every on-prem node carries them (node_labels, node_taints), a cloud-pool node its
# pool's (render.cloud_init), and the cluster layer selects and tolerates by them (kube.labels): one spelling.
ENV_LABEL = "skyrack.io/env"
RACK_LABEL = "skyrack.io/rack"
SEGMENT_LABEL = "skyrack.io/segment"  # the rack's L2 segment (`racks[].segment`, else the rack's own name)
TEAM_LABEL = "skyrack.io/team"
POOL_LABEL = "skyrack.io/pool"
ZONE_LABEL = "topology.kubernetes.io/zone"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
TEAM_TAINT_KEY = "skyrack.io/team"  # its value is the team
GPU_TAINT_KEY, GPU_TAINT_VALUE = "nvidia.com/gpu", "present"
TAINT_EFFECT = "NoSchedule"  # of both taints: running pods stay, new ones need a toleration
# On every Node in Azure (API servers, cloud pools), never on a rack's: the node-lifecycle controller leaves
# such Nodes out of its zones' health, so a WAN outage, which takes every on-prem zone away at once, is "all
# zones disrupted" to it and evicts nothing, while one failed node or rack is evicted as upstream does
# (docs/azure.md "A WAN outage"). kubelet may set it itself (the node.kubernetes.io/ prefix).
DISRUPTION_EXEMPT_LABEL = "node.kubernetes.io/exclude-disruption"


@dataclass(frozen=True)
class Member:
    """A control-plane VM (or, in the lab, a control-plane container)."""

    name: str  # e.g. etcd-0; unique in the environment
    role: str  # apiserver | etcd | etcd-events
    index: int
    ip: str
    zone: str | None
    vm_size: str
    fqdn: str
    subnet: str
    reservation: tuning.Reservation | None = None  # its kubelet's (API servers), from vm_size
    pod_cidr: str | None = None  # its pods' range (API servers: a Node like any other), from the lock


@dataclass(frozen=True)
class NodeVars:
    """One on-prem worker and every variable Ansible needs for it."""

    name: str
    ip: str
    rack: str
    team: str | None
    gpu_model: str | None
    gpu_count: int
    pod_cidr: str
    max_pods: int
    labels: dict[str, str]
    taints: list[str]
    reservation: tuning.Reservation | None = None  # kubelet's, from the rack's `hardware`


@dataclass(frozen=True)
class PoolPlan:
    name: str
    vm_size: str
    min: int
    max: int
    pod_cidr: str  # the pool's whole pod range (one prefix in the VNet address space)
    max_pods: int
    reservation: tuning.Reservation  # kubelet's, from the VM size (or the pool's `hardware`)


@dataclass
class Plan:
    env: config.Environment
    source: Path
    subnets: dict[str, str]
    apiserver_lb_ip: str
    apiserver_endpoint: str
    members: list[Member]
    nodes: list[NodeVars]
    pools: list[PoolPlan]
    sizing: sizing.Sizing
    tuning: tuning.ControlPlane  # the control plane's load settings (API server, controller manager, scheduler)
    allocation: ipam.Allocation = field(repr=False)
    api_service_ip: str  # the `kubernetes` Service's cluster IP (a SAN of every API server's certificate)
    dns_service_ip: str  # kube-dns's cluster IP: what every node's DNS cache forwards the cluster's names to
    max_pods: int  # per node, on-prem and cloud (kubernetes.pods_per_node): kubelet's maxPods

    @property
    def node_dns_ip(self) -> str:
        """Every node's DNS cache (kubernetes.node_dns_ip): every kubelet's clusterDNS, so every pod's resolver."""
        return str(self.env.kubernetes.node_dns_ip)

    @property
    def lock_path(self) -> Path:
        return self.source.with_name(f"{self.env.name}.lock.yaml")  # named after the environment, not the file

    def members_of(self, role: str) -> list[Member]:
        return [m for m in self.members if m.role == role]

    @property
    def onprem_pod_ranges(self) -> list[str]:
        """On-prem pod ranges summarised: the prefixes routed to on-prem over the VPN."""
        nets = [ipaddress.IPv4Network(n.pod_cidr) for n in self.nodes]
        return [str(n) for n in ipaddress.collapse_addresses(nets)]

    def lock_data(self) -> dict[str, Any]:
        return {
            "version": LOCK_VERSION,
            "pod_cidr": str(self.env.kubernetes.pod_cidr),
            "block_prefix": ipam.block_prefix(self.max_pods),
            "pools": {k: str(v) for k, v in sorted(self.allocation.pools.items())},
            "apiservers": {k: str(v) for k, v in sorted(self.allocation.apiservers.items())},
            "nodes": {k: str(v) for k, v in sorted(self.allocation.nodes.items())},
            "leaving": {k: str(v) for k, v in sorted(self.allocation.leaving.items())},
        }

    def to_dict(self) -> dict[str, Any]:
        env = self.env
        return {
            "environment": env.name,
            "source": str(self.source),
            "kubernetes": {"version": env.kubernetes.version, "service_cidr": str(env.kubernetes.service_cidr),
                           "pod_cidr": str(env.kubernetes.pod_cidr), "pods_per_node": self.max_pods,
                           "node_pod_prefix": ipam.block_prefix(self.max_pods)},
            "azure": {"location": env.azure.location, "resource_group": env.resource_group,
                      "dns_zone": env.dns_zone, "zones": env.azure.zones, "subnets": self.subnets,
                      "apiserver_lb_ip": self.apiserver_lb_ip,
                      "vnet_address_space": self.vnet_address_space},
            "apiserver_endpoint": self.apiserver_endpoint,
            "sizing": asdict(self.sizing),
            "tuning": {**asdict(self.tuning), "audit_log_bound_mib": self.tuning.audit_log_bound_mib},
            "members": [asdict(m) for m in self.members],
            "pools": [asdict(p) for p in self.pools],
            "onprem_pod_ranges": self.onprem_pod_ranges,
            "nodes": [asdict(n) for n in self.nodes],
            "lock": {"path": str(self.lock_path), "up_to_date": not self.allocation.changed,
                     "added": self.allocation.added, "released": self.allocation.released,
                     "moved": self.allocation.moved, "reason": self.allocation.reason,
                     "leaving": {k: str(v) for k, v in sorted(self.allocation.leaving.items())}},
        }

    @property
    def image_registries(self) -> list[str]:
        """Every upstream registry the cluster pulls from (each gets a hosts.toml to the site's mirror)."""
        refs = [*self.env.cluster.versions.model_dump().values(), "registry.k8s.io/kube-apiserver"]
        return sorted({ref.split("/", 1)[0] for ref in refs})

    def segment_peers(self, rack: str) -> list[dict[str, str]]:
        """The nodes on a rack's L2 segment (its own, or the one it shares: `racks[].segment`) and their
        pod ranges: each routes the others' directly."""
        segment = {r.name: r.l2_segment for r in self.env.racks}
        return [{"name": n.name, "ip": n.ip, "pod_cidr": n.pod_cidr} for n in self.nodes
                if segment[n.rack] == segment[rack]]

    @property
    def apiserver_pod_ranges(self) -> list[str]:
        """The API servers' pod ranges, each routed to its VM by the VNet's route table (azure.network)."""
        return [m.pod_cidr for m in self.members if m.pod_cidr]

    @property
    def vnet_address_space(self) -> list[str]:
        """The VNet's prefixes: its own CIDR, each cloud pool's pod range (alias IPs) and each API server's pod
        range (so the VPN gateway advertises them to on-prem)."""
        return [str(self.env.azure.vnet_cidr), *(p.pod_cidr for p in self.pools), *self.apiserver_pod_ranges]


def lock_path(env_path: Path) -> Path:
    """`<dir>/<name>.lock.yaml` for `<dir>/<name>.yaml` (a file named otherwise never gets this far)."""
    name = env_path.name.removesuffix(".yaml") if env_path.name.endswith(".yaml") else env_path.name
    return env_path.with_name(name + ".lock.yaml")


class _LockLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader, refusing duplicate keys (a merge that kept two ranges for one node)."""


_LockLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, config.construct_unique_mapping)


def read_lock(env_path: Path, text: str | None = None) -> dict | None:
    """The lock file next to env_path (or its given text, e.g. read from a git revision), its shape checked."""
    path = lock_path(env_path)
    label = str(path)
    if text is None:
        if not path.exists() and not path.is_symlink():
            return None
        text = files.read_text(path, MAX_LOCK_BYTES)
    try:
        data = yaml.load(text, Loader=_LockLoader)  # noqa: S506 - a safe loader
    except (yaml.YAMLError, RecursionError) as exc:
        raise InputError([config.yaml_problem(label, exc)]) from None
    if not isinstance(data, dict) or data.get("version") != LOCK_VERSION:
        raise InputError([Problem(label, "version", f"expected a skyrack lock file version {LOCK_VERSION}")])
    problems = [Problem(label, printable(k), "unknown key in a lock file") for k in data if k not in LOCK_KEYS]
    if not isinstance(data.get("pod_cidr"), str):
        problems.append(Problem(label, "pod_cidr", "expected a CIDR"))
    if type(data.get("block_prefix")) is not int:
        problems.append(Problem(label, "block_prefix", "expected a prefix length"))
    for key in RANGE_KEYS:
        entries = data.get(key)
        if entries is None:
            data[key] = {}
        elif not isinstance(entries, dict):
            problems.append(Problem(label, key, "expected a mapping of name to pod range"))
        else:
            for name, cidr in entries.items():
                if not isinstance(name, str) or _span(cidr) is None:
                    problems.append(Problem(label, f"{key}.{printable(name)}",
                                            f"{printable(repr(cidr))[:60]} is not a pod range (an IPv4 CIDR)"))
    if problems:
        raise InputError(problems[:config.MAX_PROBLEMS])
    return data


def _span(cidr: Any) -> tuple[int, int, int] | None:
    """(first address, last address, prefix) of a strict IPv4 CIDR string, or None. Fast: a lock has thousands."""
    if not isinstance(cidr, str) or not cidr.isascii() or cidr.count("/") != 1:
        return None
    addr, _, bits = cidr.partition("/")
    if not bits.isdigit() or len(bits) > 2 or not 0 <= int(bits) <= 32 or addr.count(".") != 3:
        return None
    octets = addr.split(".")
    if not all(o.isdigit() and len(o) <= 3 and int(o) <= 255 and (o == "0" or not o.startswith("0")) for o in octets):
        return None
    first, prefix = int.from_bytes(bytes(int(o) for o in octets), "big"), int(bits)
    size = 1 << (32 - prefix)
    return None if first % size else (first, first + size - 1, prefix)


def verify_lock(env: config.Environment, lock: dict, label: str) -> None:
    """The lock's ranges are usable for this environment: node and API-server ranges are blocks of the node
    size inside pod_cidr, pool ranges are inside it too, and no two ranges overlap. InputError names the lock file.

    (Nodes missing from the lock, or removed from the environment, make the lock out of date,
    not wrong: `make` reports those.) A lock for another pod_cidr or block size is re-allocated
    entirely, so its ranges are not checked against this one."""
    pod_cidr = env.kubernetes.pod_cidr
    prefix = ipam.block_prefix(env.kubernetes.pods_per_node)
    if lock.get("pod_cidr") != str(pod_cidr) or lock.get("block_prefix") != prefix:
        return
    problems: list[Problem] = []
    spans: list[tuple[int, int, str, str]] = []
    lo, hi = int(pod_cidr.network_address), int(pod_cidr.broadcast_address)
    entries = [(f"{key}.{n}", c) for key in RANGE_KEYS for n, c in (lock.get(key) or {}).items()]
    for where, cidr in entries:
        span = _span(cidr)
        if span is None:
            problems.append(Problem(label, where, f"{printable(repr(cidr))[:60]} is not a pod range (an IPv4 CIDR)"))
            continue
        first, last, bits = span
        if first < lo or last > hi:
            problems.append(Problem(label, where, f"{cidr} is outside kubernetes.pod_cidr ({pod_cidr})"))
        elif not where.startswith("pools.") and bits != prefix:
            problems.append(Problem(label, where, f"{cidr} is not a /{prefix} (the node range size for "
                                                  f"pods_per_node {env.kubernetes.pods_per_node})"))
        elif bits > prefix:
            problems.append(Problem(label, where, f"{cidr} is smaller than one node range (/{prefix})"))
        else:
            spans.append((first, last, where, cidr))
    spans.sort()
    reach: tuple[int, str] | None = None  # the furthest end so far, and whose
    for start, end, where, net in spans:
        if reach is not None and start <= reach[0]:
            problems.append(Problem(label, where, f"{net} overlaps the range of {reach[1]}"))
        if reach is None or end > reach[0]:
            reach = (end, where)
    if problems:
        raise InputError(problems[:config.MAX_PROBLEMS])


def node_labels(env: config.Environment, rack: config.Rack) -> dict[str, str]:
    labels = {ENV_LABEL: env.name, RACK_LABEL: rack.name, SEGMENT_LABEL: rack.l2_segment,
              ZONE_LABEL: f"onprem-{rack.name}"}
    if rack.team:
        labels[TEAM_LABEL] = rack.team
    if rack.gpu and rack.gpu.count:
        labels[GPU_PRODUCT_LABEL] = rack.gpu.model
        labels[GPU_COUNT_LABEL] = str(rack.gpu.count)
    return labels


def node_taints(rack: config.Rack) -> list[str]:
    """'key=value:Effect' (kubeadm's and kubectl's format): the team's, and the GPU taint on GPU racks."""
    taints = []
    if rack.team:
        taints.append(f"{TEAM_TAINT_KEY}={rack.team}:{TAINT_EFFECT}")
    if rack.gpu and rack.gpu.count:
        taints.append(f"{GPU_TAINT_KEY}={GPU_TAINT_VALUE}:{TAINT_EFFECT}")
    return taints


def build(env: config.Environment, source: Path, lock: dict | None) -> Plan:
    """Derive the plan. Raises InputError if the address space cannot hold it, or the lock is wrong."""
    label = str(source)
    if lock is not None:
        verify_lock(env, lock, str(lock_path(source)))
    subnets = ipam.vnet_layout(env.azure.vnet_cidr)
    sz = sizing.size(env.node_count, env.control_plane.etcd.quota_backend_gib,
                     env.control_plane.apiservers.vm_size, env.control_plane.etcd.vm_size)
    zones = env.azure.zones
    api_hw = sizing.vm_hardware(sz.apiserver_vm_size)
    api_reservation = tuning.kubelet_reservation(*api_hw) if api_hw else None
    names = [node.name for _, node, _ in env.rack_nodes]
    max_pods = env.kubernetes.pods_per_node
    api_names = [f"apiserver-{i}" for i in range(env.control_plane.apiservers.count)]
    try:
        alloc = ipam.allocate(env.kubernetes.pod_cidr, max_pods, names,
                              {p.name: p.max for p in env.cloud_pools}, lock, members=api_names)
    except ValueError as exc:
        raise InputError([Problem(label, "kubernetes.pod_cidr", str(exc))]) from None
    members: list[Member] = []
    counts = {"apiserver": env.control_plane.apiservers.count, "etcd": env.control_plane.etcd.count,
              "etcd-events": env.control_plane.etcd.count if env.control_plane.etcd.events_cluster else 0}
    subnet_of = {"apiserver": "apiservers", "etcd": "etcd", "etcd-events": "etcd-events"}
    for role in ROLES:
        for i in range(counts[role]):
            subnet = subnets[subnet_of[role]]
            members.append(Member(
                name=f"{role}-{i}", role=role, index=i, ip=str(ipam.member_ip(subnet, i)),
                zone=zones[i % len(zones)] if zones else None,
                vm_size=sz.apiserver_vm_size if role == "apiserver" else sz.etcd_vm_size,
                fqdn=f"{role}-{i}.{env.dns_zone}", subnet=str(subnet),
                reservation=api_reservation if role == "apiserver" else None,
                pod_cidr=str(alloc.apiservers[f"{role}-{i}"]) if role == "apiserver" else None,
            ))
    # The load balancer's frontend: Azure's internal load balancer, or in the lab its stand-in on the lab host
    # (skyrack.lab.balancer). Every client, the API servers themselves included, reaches the cluster there.
    lb_ip = str(ipam.load_balancer_ip(subnets["apiservers"]))

    label_cache: dict[str, tuple[dict[str, str], list[str]]] = {}
    nodes = []
    for rack, node, _ in env.rack_nodes:
        if rack.name not in label_cache:
            label_cache[rack.name] = (node_labels(env, rack), node_taints(rack))
        labels, taints = label_cache[rack.name]
        nodes.append(NodeVars(
            name=node.name, ip=str(node.ip), rack=rack.name, team=rack.team,
            gpu_model=rack.gpu.model if rack.gpu else None, gpu_count=rack.gpu.count if rack.gpu else 0,
            pod_cidr=str(alloc.nodes[node.name]), max_pods=max_pods, labels=labels, taints=taints,
            reservation=rack.hardware.reservation if rack.hardware else None,
        ))
    pools = [PoolPlan(name=p.name, vm_size=p.vm_size, min=p.min, max=p.max, pod_cidr=str(alloc.pools[p.name]),
                      max_pods=max_pods, reservation=p.reservation) for p in env.cloud_pools]
    service_cidr = env.kubernetes.service_cidr
    return Plan(env=env, source=source, subnets={k: str(v) for k, v in subnets.items()},
                apiserver_lb_ip=lb_ip, apiserver_endpoint=f"https://{lb_ip}:6443",
                members=members, nodes=nodes, pools=pools, sizing=sz, allocation=alloc,
                tuning=tuning.control_plane(env.node_count, env.control_plane.apiservers.count),
                api_service_ip=str(ipam.service_ip(service_cidr, ipam.API_SERVICE_INDEX)),
                dns_service_ip=str(ipam.service_ip(service_cidr, ipam.DNS_SERVICE_INDEX)), max_pods=max_pods)


def make(env_path: str | Path, *, require_lock: bool = True) -> Plan:
    """Load, validate and plan an environment file.

    With `require_lock` (what every consumer but `skyrack plan` uses) a lock file that
    does not record exactly this plan's pod ranges is an error: a consumer must never
    act on allocations nobody has reviewed.
    """
    env_path = Path(env_path)
    env = config.load(env_path)
    plan = build(env, env_path, read_lock(env_path))
    if require_lock and plan.allocation.changed:
        raise InputError([lock_problem(plan)])
    return plan


def lock_problem(plan: Plan) -> Problem:
    a = plan.allocation
    parts = []
    if a.reason:
        parts.append(a.reason)
    for what, items in (("without a pod range", a.added), ("removed from the file", a.released),
                        ("moved", a.moved)):
        if items:
            shown = ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")
            parts.append(f"{len(items)} {what} ({shown})")
    what = "missing" if not plan.lock_path.exists() else "out of date: " + "; ".join(parts)
    return Problem(str(plan.lock_path), "", f"{what}; run `skyrack plan {plan.source}` and commit the lock file")


def lock_text(plan: Plan) -> str:
    data = plan.lock_data()
    lines = [
        f"# Pod-range allocations for {plan.source.name}, written by `skyrack plan`. Commit this file.",
        "# A node keeps its range for life: review any change here like a lock file.",
        f"version: {data['version']}",
        f"pod_cidr: {data['pod_cidr']}",
        f"block_prefix: {data['block_prefix']}",
    ]
    for key in RANGE_KEYS:
        if data[key]:
            if key == "leaving":
                lines.append("# Removed from the file; reserved until `skyrack join` has drained, reset and deleted them.")
            lines.append(f"{key}:")
            lines.extend(f"  {name}: {cidr}" for name, cidr in data[key].items())
        elif key in ("pools", "nodes"):
            lines.append(f"{key}: {{}}")
    return "\n".join(lines) + "\n"


def release(plan: Plan, names: list[str]) -> bool:
    """Drop leaving nodes from the lock (their ranges free again): `skyrack join` calls this once they are
    gone from the cluster. True when the lock file changed."""
    gone = [n for n in names if n in plan.allocation.leaving]
    for n in gone:
        del plan.allocation.leaving[n]
    return bool(gone) and write_lock(plan)


def write_lock(plan: Plan) -> bool:
    """Write the lock file if it differs. Returns True when it was (re)written."""
    return files.atomic_write(plan.lock_path, lock_text(plan))
