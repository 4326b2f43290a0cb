"""The plan: everything derived from a validated environment, for every consumer.

Pulumi components, the Ansible inventory and the rendered files all read a `Plan`;
none of them re-derives an address, a size or a label. Building a plan is pure: the
only state it reads is the lock file (`configs/<env>.lock.yaml`) that pins pod ranges,
and `write_lock` is the only function here that writes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import config, ipam, sizing
from .errors import InputError, Problem

LOCK_VERSION = 1
ROLES = ("apiserver", "etcd", "etcd-events")


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


@dataclass(frozen=True)
class PoolPlan:
    name: str
    vm_size: str
    min: int
    max: int
    pod_cidr: str  # the pool's whole pod range (one prefix in the VNet address space)
    pods_per_node: int


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
    allocation: ipam.Allocation = field(repr=False)

    @property
    def lock_path(self) -> Path:
        return lock_path(self.source)

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
            "block_prefix": ipam.block_prefix(self.env.kubernetes.pods_per_node),
            "pools": {k: str(v) for k, v in sorted(self.allocation.pools.items())},
            "nodes": {k: str(v) for k, v in sorted(self.allocation.nodes.items())},
        }

    def to_dict(self) -> dict[str, Any]:
        env = self.env
        return {
            "environment": env.name,
            "source": str(self.source),
            "kubernetes": {"version": env.kubernetes.version, "service_cidr": str(env.kubernetes.service_cidr),
                           "pod_cidr": str(env.kubernetes.pod_cidr), "pods_per_node": env.kubernetes.pods_per_node,
                           "node_pod_prefix": ipam.block_prefix(env.kubernetes.pods_per_node)},
            "azure": {"location": env.azure.location, "resource_group": env.resource_group,
                      "dns_zone": env.dns_zone, "zones": env.azure.zones, "subnets": self.subnets,
                      "apiserver_lb_ip": self.apiserver_lb_ip,
                      "vnet_address_space": self.vnet_address_space},
            "apiserver_endpoint": self.apiserver_endpoint,
            "sizing": asdict(self.sizing),
            "members": [asdict(m) for m in self.members],
            "pools": [asdict(p) for p in self.pools],
            "onprem_pod_ranges": self.onprem_pod_ranges,
            "nodes": [asdict(n) for n in self.nodes],
            "lock": {"path": str(self.lock_path), "up_to_date": not self.allocation.changed,
                     "added": self.allocation.added, "released": self.allocation.released,
                     "moved": self.allocation.moved, "reason": self.allocation.reason},
        }

    @property
    def image_registries(self) -> list[str]:
        """Every upstream registry the cluster pulls from (each gets a hosts.toml to the site's mirror)."""
        refs = [*self.env.cluster.versions.model_dump().values(), "registry.k8s.io/kube-apiserver"]
        return sorted({ref.split("/", 1)[0] for ref in refs})

    def rack_peers(self, rack: str) -> list[dict[str, str]]:
        """The nodes of a rack (one L2 segment) and their pod ranges: each routes the others' directly."""
        return [{"name": n.name, "ip": n.ip, "pod_cidr": n.pod_cidr} for n in self.nodes if n.rack == rack]

    @property
    def vnet_address_space(self) -> list[str]:
        """The VNet's prefixes: its own CIDR plus each cloud pool's pod range (alias IPs)."""
        return [str(self.env.azure.vnet_cidr), *(p.pod_cidr for p in self.pools)]


def lock_path(env_path: Path) -> Path:
    return env_path.with_name(env_path.stem + ".lock.yaml")


def read_lock(env_path: Path, text: str | None = None) -> dict | None:
    """The lock file next to env_path (or its given text, e.g. read from a git revision)."""
    path = lock_path(env_path)
    if text is None:
        if not path.exists():
            return None
        text = path.read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise InputError([Problem(str(path), "", f"invalid YAML: {exc}")]) from None
    if not isinstance(data, dict) or data.get("version") != LOCK_VERSION:
        raise InputError([Problem(str(path), "version", f"expected a skyrack lock file version {LOCK_VERSION}")])
    return data


def node_labels(env: config.Environment, rack: config.Rack) -> dict[str, str]:
    labels = {"skyrack.io/env": env.name, "skyrack.io/rack": rack.name,
              "topology.kubernetes.io/zone": f"onprem-{rack.name}"}
    if rack.team:
        labels["skyrack.io/team"] = rack.team
    if rack.gpu and rack.gpu.count:
        labels["nvidia.com/gpu.product"] = rack.gpu.model
        labels["nvidia.com/gpu.count"] = str(rack.gpu.count)
    return labels


def node_taints(rack: config.Rack) -> list[str]:
    taints = []
    if rack.team:
        taints.append(f"skyrack.io/team={rack.team}:NoSchedule")
    if rack.gpu and rack.gpu.count:
        taints.append("nvidia.com/gpu=present:NoSchedule")
    return taints


def build(env: config.Environment, source: Path, lock: dict | None) -> Plan:
    """Derive the plan. Raises InputError if the address space cannot hold it."""
    label = str(source)
    subnets = ipam.vnet_layout(env)
    sz = sizing.size(env.node_count, env.control_plane.etcd.quota_backend_gib,
                     env.control_plane.apiservers.vm_size, env.control_plane.etcd.vm_size)
    zones = env.azure.zones
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
            ))
    lb_ip = str(ipam.load_balancer_ip(subnets["apiservers"]))
    # The lab has no load balancer: its single API-server endpoint is the first member.
    endpoint_ip = members[0].ip if env.lab is not None else lb_ip

    names = [node.name for _, node, _ in env.rack_nodes]
    try:
        alloc = ipam.allocate(env.kubernetes.pod_cidr, env.kubernetes.pods_per_node, names,
                              {p.name: p.max for p in env.cloud_pools}, lock)
    except ValueError as exc:
        raise InputError([Problem(label, "kubernetes.pod_cidr", str(exc))]) from None

    max_pods = env.kubernetes.pods_per_node
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
        ))
    pools = [PoolPlan(name=p.name, vm_size=p.vm_size, min=p.min, max=p.max,
                      pod_cidr=str(alloc.pools[p.name]), pods_per_node=max_pods) for p in env.cloud_pools]
    return Plan(env=env, source=source, subnets={k: str(v) for k, v in subnets.items()},
                apiserver_lb_ip=lb_ip, apiserver_endpoint=f"https://{endpoint_ip}:6443",
                members=members, nodes=nodes, pools=pools, sizing=sz, allocation=alloc)


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
    for what, items in (("without a pod range", a.added), ("removed", a.released), ("moved", a.moved)):
        if items:
            shown = ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")
            parts.append(f"{len(items)} {what} ({shown})")
    what = "missing" if not plan.lock_path.exists() else "out of date: " + "; ".join(parts)
    return Problem(str(plan.lock_path), "", f"{what}; run `skyrack plan {plan.source}` and commit the lock file")


def write_lock(plan: Plan) -> bool:
    """Write the lock file if it differs. Returns True when it was (re)written."""
    data = plan.lock_data()
    lines = [
        f"# Pod-range allocations for {plan.source.name}, written by `skyrack plan`. Commit this file.",
        "# A node keeps its range for life: review any change here like a lock file.",
        f"version: {data['version']}",
        f"pod_cidr: {data['pod_cidr']}",
        f"block_prefix: {data['block_prefix']}",
    ]
    for key in ("pools", "nodes"):
        if data[key]:
            lines.append(f"{key}:")
            lines.extend(f"  {name}: {cidr}" for name, cidr in data[key].items())
        else:
            lines.append(f"{key}: {{}}")
    text = "\n".join(lines) + "\n"
    path = plan.lock_path
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return True
