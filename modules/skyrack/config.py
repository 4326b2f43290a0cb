"""The environment file: schema, loading and validation.

`configs/<env>.yaml` is the single source of truth for one environment. This module
turns it into a validated, immutable `Environment` or raises `InputError` listing
*every* problem as ``file: path.to.field: what is wrong``. Nothing here imports
Pulumi or Ansible.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import upstream
from .errors import InputError, Problem, format_path

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
Label = Annotated[str, Field(pattern=DNS_LABEL)]
IPv4Net = ipaddress.IPv4Network
IPv4Addr = ipaddress.IPv4Address
ETCD_COUNTS = (1, 3, 5, 7)
AZURE_RESERVED_ASNS = {65515, 65517, 65518, 65519, 65520}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _network(value: Any) -> Any:
    """Accept '10.0.0.0/16' but reject host bits set ('10.0.0.1/16') with a clear message."""
    if isinstance(value, str):
        try:
            return ipaddress.IPv4Network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IPv4 network in CIDR form ({exc})") from None
    return value


# Ranges Azure treats as private: Storage and Key Vault network rules refuse them (only public
# internet addresses pass through a firewall rule); such networks reach Azure over the VPN.
PRIVATE_RANGES = tuple(ipaddress.IPv4Network(c) for c in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                                         "100.64.0.0/10"))


def is_private(net: IPv4Net) -> bool:
    return any(net.subnet_of(p) for p in PRIVATE_RANGES)


class Azure(Strict):
    location: Annotated[str, Field(pattern=r"^[a-z0-9]+$")]
    zones: list[Literal["1", "2", "3"]] = Field(default_factory=lambda: ["1", "2", "3"])
    vnet_cidr: IPv4Net
    # Public addresses (offices, VPN egress) allowed through the Key Vault and Storage firewalls.
    # A private range here is read as an operator network (the field's old second meaning).
    admin_cidrs: list[IPv4Net] = Field(default_factory=list)
    # Private operator networks reaching the API server (6443) over the VPN; replies are routed back to them.
    operator_cidrs: list[IPv4Net] = Field(default_factory=list)
    resource_group: Annotated[str, Field(pattern=r"^[-\w._()]{1,90}$")] | None = None

    _cidr = field_validator("vnet_cidr", mode="before")(_network)

    @field_validator("admin_cidrs", "operator_cidrs", mode="before")
    @classmethod
    def _admin(cls, v: Any) -> Any:
        return [_network(x) for x in v] if isinstance(v, list) else v

    @field_validator("operator_cidrs")
    @classmethod
    def _operators_private(cls, v: list[IPv4Net]) -> list[IPv4Net]:
        public = [str(c) for c in v if not is_private(c)]
        if public:
            raise ValueError(f"{', '.join(public)} is not a private range: operator networks reach the API server "
                             "over the VPN; public addresses for Key Vault and Storage go in azure.admin_cidrs")
        return v

    @model_validator(mode="after")
    def _operators_outside_vnet(self) -> Azure:
        # Only the new field: legacy private admin_cidrs entries are judged by `skyrack check` (etcd-isolated).
        inside = [str(c) for c in self.operator_cidrs if c.overlaps(self.vnet_cidr)]
        if inside:
            raise ValueError(f"operator_cidrs {', '.join(inside)} overlap vnet_cidr ({self.vnet_cidr}): "
                             "operator networks are routed over the VPN")
        return self

    @property
    def operator_networks(self) -> list[IPv4Net]:
        """Who reaches the API server over the VPN: `operator_cidrs` plus private `admin_cidrs` entries."""
        return [*self.operator_cidrs, *(c for c in self.admin_cidrs if is_private(c) and c not in self.operator_cidrs)]

    @property
    def public_admin_networks(self) -> list[IPv4Net]:
        """What the Key Vault and Storage firewalls admit: the public `admin_cidrs` entries."""
        return [c for c in self.admin_cidrs if not is_private(c)]

    @field_validator("zones")
    @classmethod
    def _unique_zones(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"zones are listed twice: {v}")
        return v


class ApiServers(Strict):
    count: Annotated[int, Field(ge=1, le=9)] = 3
    vm_size: str = "auto"


class Etcd(Strict):
    count: int = 3
    vm_size: str = "auto"
    events_cluster: bool = False
    quota_backend_gib: Annotated[int, Field(ge=1, le=64)] = 8

    @field_validator("count")
    @classmethod
    def _odd(cls, v: int) -> int:
        if v not in ETCD_COUNTS:
            kind = "even" if v % 2 == 0 else "out of range"
            raise ValueError(
                f"{v} is {kind}: etcd needs 1, 3, 5 or 7 members (an even count adds no fault tolerance)"
            )
        return v


class ControlPlane(Strict):
    apiservers: ApiServers = ApiServers()
    etcd: Etcd = Etcd()


class Kubernetes(Strict):
    version: Annotated[str, Field(pattern=r"^1\.(\d+)\.(\d+)$")]
    service_cidr: IPv4Net = ipaddress.IPv4Network("10.96.0.0/12")
    pod_cidr: IPv4Net
    pods_per_node: Annotated[int, Field(ge=8, le=250)] = 32
    cluster_domain: str = "cluster.local"

    _cidrs = field_validator("service_cidr", "pod_cidr", mode="before")(_network)

    @field_validator("service_cidr")
    @classmethod
    def _service_size(cls, v: IPv4Net) -> IPv4Net:
        if v.prefixlen < 12:
            raise ValueError(f"{v} is larger than /12, the largest service range kube-apiserver accepts")
        return v

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])


class CloudPool(Strict):
    name: Label
    vm_size: str
    min: Annotated[int, Field(ge=0)] = 0
    max: Annotated[int, Field(ge=1, le=1000)]

    @model_validator(mode="after")
    def _bounds(self) -> CloudPool:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class Vpn(Strict):
    peer_ip: IPv4Addr
    asn: Annotated[int, Field(ge=1, le=4294967294)] | None = None
    bgp_peer_ip: IPv4Addr | None = None  # the device's private BGP address; required with `asn`

    @field_validator("asn")
    @classmethod
    def _asn(cls, v: int | None) -> int | None:
        if v in AZURE_RESERVED_ASNS:
            raise ValueError(f"ASN {v} is reserved by Azure VPN gateways")
        return v

    @model_validator(mode="after")
    def _bgp_peer(self) -> Vpn:
        if self.asn is not None and self.bgp_peer_ip is None:
            raise ValueError("bgp_peer_ip is required when asn is set: the on-prem device's private BGP address "
                             "(Azure peers with it over the tunnel; its /32 goes into the local gateway's prefixes)")
        if self.bgp_peer_ip is not None and self.asn is None:
            raise ValueError("bgp_peer_ip is set but asn is not: BGP needs the on-prem device's ASN")
        if self.bgp_peer_ip is not None and not is_private(ipaddress.IPv4Network(self.bgp_peer_ip)):
            raise ValueError(f"bgp_peer_ip {self.bgp_peer_ip} is not a private address: the BGP session runs "
                             "inside the tunnel, not to the device's public peer_ip")
        return self


class OnPrem(Strict):
    cidrs: Annotated[list[IPv4Net], Field(min_length=1)]
    vpn: Vpn | None = None

    @field_validator("cidrs", mode="before")
    @classmethod
    def _nets(cls, v: Any) -> Any:
        return [_network(x) for x in v] if isinstance(v, list) else v


class Mirrors(Strict):
    """Where nodes get packages. Racks have no internet access either."""

    apt_proxy: Annotated[str, Field(pattern=r"^https?://[^\s/]+(/\S*)?$")] | None = None
    kubernetes: Annotated[str, Field(pattern=r"^(https?|file)://\S+$")] | None = None
    # A registry mirror every node pulls through (containerd `hosts.toml`): images keep their
    # upstream names, the mirror serves `<upstream registry>/<repository>` under its own /v2/.
    registry: Annotated[str, Field(pattern=r"^https?://[^\s/]+(/[^\s]*[^\s/])?$")] | None = None


class Team(Strict):
    name: Label
    gpu_quota: Annotated[int, Field(ge=0)] | None = None


class Gpu(Strict):
    model: Annotated[str, Field(pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")]
    count: Annotated[int, Field(ge=0, le=16)] = 8
    vendor: Literal["nvidia"] = "nvidia"


class Node(Strict):
    name: Label
    ip: IPv4Addr


class NodeRange(Strict):
    """Compact form for a rack of many nodes: ``{count: 64, first_ip: 10.64.1.11}``.

    Names come from ``name`` (a Python format string with ``{rack}`` and ``{index}``),
    addresses are consecutive from ``first_ip``.
    """

    count: Annotated[int, Field(ge=1, le=4096)]
    first_ip: IPv4Addr
    name: str = "{rack}-n{index:02d}"
    start: Annotated[int, Field(ge=0)] = 1


class Rack(Strict):
    name: Label
    team: str | None = None
    gpu: Gpu | None = None
    nodes: list[Node] = Field(default_factory=list)
    node_range: NodeRange | None = None

    @model_validator(mode="after")
    def _has_nodes(self) -> Rack:
        if not self.nodes and self.node_range is None:
            raise ValueError("a rack needs `nodes` (a list) or `node_range` (count and first_ip)")
        return self


class Backups(Strict):
    container: Label = "etcd-snapshots"
    interval_minutes: Annotated[int, Field(ge=5, le=1440)] = 60
    retention_days: Annotated[int, Field(ge=1, le=365)] = 14


class Lab(Strict):
    """Present only for the local lab: nodes are systemd-nspawn containers on this host."""

    bridge: Annotated[str, Field(pattern=r"^[a-z][a-z0-9]{1,14}$")] = "skyrack0"
    subnet: IPv4Net = ipaddress.IPv4Network("198.18.0.0/24")
    suite: str = "bookworm"

    _cidr = field_validator("subnet", mode="before")(_network)

    @property
    def host_ip(self) -> IPv4Addr:
        return self.subnet.network_address + 1


Tier = Literal["production", "staging", "dev", "lab"]


class Environment(Strict):
    name: Label
    # What the environment is for; `skyrack check` holds production to stricter rules.
    tier: Tier = "dev"
    azure: Azure
    control_plane: ControlPlane = ControlPlane()
    kubernetes: Kubernetes
    cloud_pools: list[CloudPool] = Field(default_factory=list)
    onprem: OnPrem
    mirrors: Mirrors = Mirrors()
    teams: list[Team] = Field(default_factory=list)
    racks: list[Rack] = Field(default_factory=list)
    backups: Backups = Backups()
    lab: Lab | None = None
    cluster: ClusterLayer = Field(default_factory=lambda: ClusterLayer())

    model_config = ConfigDict(extra="forbid", frozen=True, ignored_types=(cached_property,))

    @property
    def resource_group(self) -> str:
        return self.azure.resource_group or f"skyrack-{self.name}"

    @property
    def dns_zone(self) -> str:
        return f"{self.name}.skyrack.internal"

    @cached_property
    def rack_nodes(self) -> list[tuple[Rack, Node, str]]:
        """Every on-prem node as (rack, node, path-in-file), compact ranges expanded."""
        out: list[tuple[Rack, Node, str]] = []
        for ri, rack in enumerate(self.racks):
            for ni, node in enumerate(rack.nodes):
                out.append((rack, node, f"racks[{ri}].nodes[{ni}]"))
            rng = rack.node_range
            if rng is not None:
                first = int(rng.first_ip)
                for k in range(rng.count):
                    name = rng.name.format(rack=rack.name, index=rng.start + k)
                    node = Node.model_construct(name=name, ip=ipaddress.IPv4Address(first + k))
                    out.append((rack, node, f"racks[{ri}].node_range({name})"))
        return out

    @property
    def cloud_max_nodes(self) -> int:
        return sum(p.max for p in self.cloud_pools)

    @property
    def node_count(self) -> int:
        """Nodes the control plane must be sized for: on-prem plus every cloud pool at max."""
        return len(self.rack_nodes) + self.cloud_max_nodes


# ----------------------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice (first on line {seen[key].start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: Path, text: str | None = None) -> Any:
    """Parse a YAML file; problems name the file, line and column."""
    label = str(path)
    if text is None:
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise InputError([Problem(label, "", "no such file")]) from None
        except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
            raise InputError([Problem(label, "", f"cannot read: {exc}")]) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc)
        raise InputError([Problem(label, where, f"invalid YAML: {what}")]) from None


def _known_keys(loc: tuple) -> list[str]:
    """The keys allowed at a location, for 'did you mean' hints on typos."""
    model: Any = Environment
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return []
        ann = field.annotation
        for cand in (ann, *getattr(ann, "__args__", ())):
            inner = getattr(cand, "__args__", (cand,))
            for c in (cand, *inner):
                if isinstance(c, type) and issubclass(c, BaseModel):
                    model = c
                    break
            else:
                continue
            break
        else:
            return []
    return list(model.model_fields) if hasattr(model, "model_fields") else []


def _pydantic_problems(label: str, exc: ValidationError) -> list[Problem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = format_path(loc)
        if err["type"] == "extra_forbidden":
            hint = difflib.get_close_matches(str(loc[-1]), _known_keys(loc), n=1)
            msg = "unknown key" + (f" (did you mean '{hint[0]}'?)" if hint else "")
        elif err["type"] == "missing":
            msg = "required but missing"
        else:
            msg = err["msg"].removeprefix("Value error, ")
            if "input" in err and err["type"] not in ("value_error",) and not isinstance(err["input"], dict):
                msg += f" (got {err['input']!r})"
        problems.append(Problem(label, path, msg))
    return problems


def load(path: str | Path, text: str | None = None) -> Environment:
    """Load and fully validate an environment file. Raises InputError with every problem."""
    path = Path(path)
    label = str(path)
    data = read_yaml(path, text)
    if not isinstance(data, dict):
        raise InputError([Problem(label, "", "expected a mapping of keys at the top level")])
    try:
        env = Environment.model_validate(data)
    except ValidationError as exc:
        raise InputError(_pydantic_problems(label, exc)) from None
    problems = [Problem(label, p, m) for p, m in semantic_problems(env, path.stem)]
    if problems:
        raise InputError(problems)
    return env


# ----------------------------------------------------------------------------- semantics


def semantic_problems(env: Environment, file_stem: str | None = None) -> list[tuple[str, str]]:
    """Rules that span fields. Returns (path, message) pairs, all of them, in file order."""
    out: list[tuple[str, str]] = []
    if file_stem is not None and env.name != file_stem and not file_stem.startswith(env.name + "."):
        out.append(("name", f"{env.name!r} does not match the file name {file_stem!r} (the stack is named after the file)"))

    nets = [("azure.vnet_cidr", env.azure.vnet_cidr), ("kubernetes.service_cidr", env.kubernetes.service_cidr),
            ("kubernetes.pod_cidr", env.kubernetes.pod_cidr)]
    nets += [(f"onprem.cidrs[{i}]", c) for i, c in enumerate(env.onprem.cidrs)]
    for i, (pa, a) in enumerate(nets):
        for pb, b in nets[:i]:
            if a.overlaps(b):
                out.append((pa, f"{a} overlaps {pb} ({b})"))

    teams = {}
    for i, team in enumerate(env.teams):
        if team.name in teams:
            out.append((f"teams[{i}].name", f"team {team.name!r} is already defined at teams[{teams[team.name]}]"))
        teams.setdefault(team.name, i)
    _dupes(out, "cloud_pools", [p.name for p in env.cloud_pools], "pool")
    _dupes(out, "racks", [r.name for r in env.racks], "rack")

    for ri, rack in enumerate(env.racks):
        if rack.team is not None and rack.team not in teams:
            known = ", ".join(teams) or "none are defined"
            out.append((f"racks[{ri}].team", f"unknown team {rack.team!r} (teams: {known})"))
        if rack.node_range is not None:
            try:
                rack.node_range.name.format(rack=rack.name, index=rack.node_range.start)
            except (KeyError, IndexError, ValueError) as exc:
                out.append((f"racks[{ri}].node_range.name", f"bad name pattern: {exc!r}; use {{rack}} and {{index}}"))
                return out  # names cannot be expanded; later checks would only repeat this
            last = int(rack.node_range.first_ip) + rack.node_range.count - 1
            if last > int(ipaddress.IPv4Address("255.255.255.255")):
                out.append((f"racks[{ri}].node_range.count", "the range runs past 255.255.255.255"))
                return out

    names: dict[str, str] = {}
    ips: dict[IPv4Addr, str] = {}
    label_re = re.compile(DNS_LABEL)
    onprem = env.onprem.cidrs
    for _rack, node, where in env.rack_nodes:
        if node.name in names:
            out.append((f"{where}.name", f"{node.name} is already used by {names[node.name]}"))
        else:
            names[node.name] = where
        if not label_re.match(node.name):
            out.append((f"{where}.name", f"{node.name!r} is not a DNS-1123 label"))
        if node.ip in ips:
            out.append((f"{where}.ip", f"{node.ip} is already used by {ips[node.ip]}"))
        else:
            ips[node.ip] = where
        if not any(node.ip in c for c in onprem):
            out.append((f"{where}.ip", f"{node.ip} is outside onprem.cidrs ({', '.join(map(str, onprem))})"))
        elif any(node.ip in (c.network_address, c.broadcast_address) for c in onprem if node.ip in c):
            out.append((f"{where}.ip", f"{node.ip} is the network or broadcast address of its on-prem CIDR"))

    from . import ipam  # local import: ipam depends on this module's types

    need = env.node_count
    have = ipam.block_capacity(env.kubernetes.pod_cidr, env.kubernetes.pods_per_node)
    if need > have:
        block = ipam.block_prefix(env.kubernetes.pods_per_node)
        out.append(("kubernetes.pod_cidr",
                    f"{env.kubernetes.pod_cidr} holds {have} /{block} node ranges but {need} nodes need one "
                    f"({len(env.rack_nodes)} on-prem + {env.cloud_max_nodes} cloud pool maximum)"))
    vnet_problem = ipam.vnet_problem(env)
    if vnet_problem:
        out.append(("azure.vnet_cidr", vnet_problem))
    if env.lab is not None:
        out.extend(_lab_problems(env))
    out.extend(_cluster_problems(env))
    return out


def _dupes(out: list[tuple[str, str]], field: str, names: list[str], what: str) -> None:
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            out.append((f"{field}[{i}].name", f"{what} {name!r} is already defined at {field}[{first[name]}]"))
        first.setdefault(name, i)


def _lab_problems(env: Environment) -> list[tuple[str, str]]:
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
    if build is None:
        out.append(("kubernetes.version", f"{env.kubernetes.version} is not a version the lab builds from source "
                                          f"(known to build: {upstream.known_versions()})"))
    elif env.mirrors.kubernetes is not None:  # the lab builds and serves these images itself
        built = build.images()
        for fld, image in (("scheduler_plugins", built["scheduler"]), ("coredns", built["coredns"]),
                           ("pause", built["pause"])):
            if getattr(env.cluster.versions, fld) != image:
                out.append((f"cluster.versions.{fld}", f"the lab builds {image} for Kubernetes "
                                                       f"{env.kubernetes.version}; set that"))
    for _rack, node, where in env.rack_nodes:
        if node.ip == env.lab.host_ip:
            out.append((f"{where}.ip", f"{node.ip} is the lab host's own address on the bridge"))
    return out


# ----------------------------------------------------------------------------- the cluster layer
# Read by skyrack.kube (pulumi-kubernetes): what the batch cluster on top of the control plane
# looks like. Every field has a default, so an environment file without `cluster:` is valid.

Quantity = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P)?$")]
ImageRef = Annotated[str, Field(
    pattern=r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+(:[\w][\w.-]{0,127}|@sha256:[0-9a-f]{64})$")]


class Balloon(Strict):
    """Low-priority placeholder pods that hold capacity for a team until real work preempts them."""

    replicas: Annotated[int, Field(ge=0, le=10000)] = 0
    gpus: Annotated[int, Field(ge=0, le=16)] = 8  # per pod: 8 holds a whole GPU node
    cpu: Quantity = "1"
    memory: Quantity = "1Gi"


class TeamLayer(Strict):
    """A team's share of the cluster beyond `teams[].gpu_quota` (None = no limit on that resource)."""

    cpu: Quantity | None = None
    memory: Quantity | None = None
    pods: Annotated[int, Field(ge=1)] | None = None
    balloon: Balloon = Balloon()


class Autoscaler(Strict):
    """cluster-autoscaler for the cloud pools (Azure VM scale sets)."""

    max_scale_down_share: Annotated[float, Field(gt=0, le=0.5)] = 0.1
    scale_down_unneeded_minutes: Annotated[int, Field(ge=1, le=1440)] = 10
    scale_down_delay_after_add_minutes: Annotated[int, Field(ge=0, le=1440)] = 10
    max_graceful_termination_seconds: Annotated[int, Field(ge=0, le=86400)] = 600


class GpuHealth(Strict):
    interval_seconds: Annotated[int, Field(ge=30, le=86400)] = 300


class Versions(Strict):
    """Every image the cluster layer runs, pinned in one place per environment.

    kube-proxy is not listed: it always runs the environment's `kubernetes.version`.
    """

    coredns: ImageRef = "registry.k8s.io/coredns/coredns:v1.11.3"
    pause: ImageRef = "registry.k8s.io/pause:3.10"
    scheduler_plugins: ImageRef = "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.31.8"
    nvidia_device_plugin: ImageRef = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    dcgm_exporter: ImageRef = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"
    gpu_health_check: ImageRef = "nvcr.io/nvidia/cuda:12.6.3-base-ubuntu22.04"
    kubectl: ImageRef = "docker.io/alpine/k8s:1.31.2"  # the GPU health check's tainter: needs sh and kubectl
    prometheus: ImageRef = "quay.io/prometheus/prometheus:v2.55.1"
    cluster_autoscaler: ImageRef = "registry.k8s.io/autoscaling/cluster-autoscaler:v1.31.1"


class ClusterLayer(Strict):
    bootstrap_token_ttl_hours: Annotated[int, Field(ge=1, le=24 * 30)] = 24
    teams: dict[str, TeamLayer] = Field(default_factory=dict)
    autoscaler: Autoscaler = Autoscaler()
    gpu_health: GpuHealth = GpuHealth()
    prometheus_retention_days: Annotated[int, Field(ge=1, le=365)] = 15
    gang_permit_wait_seconds: Annotated[int, Field(ge=1, le=3600)] = 60  # a gang's pods wait this long for the rest
    versions: Versions = Versions()


def _cluster_problems(env: Environment) -> list[tuple[str, str]]:
    known = [t.name for t in env.teams]
    return [(f"cluster.teams.{name}", f"unknown team {name!r} (teams: {', '.join(known) or 'none are defined'})")
            for name in env.cluster.teams if name not in known]
