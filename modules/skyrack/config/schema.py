"""The environment file's schema: every field, its type, its bounds and its own validation.

A pydantic model per section of `configs/<env>.yaml`; `Environment` is the whole file. Rules
that span fields are `semantics`, reading the file is `yaml_file`, turning pydantic's errors
into `file: path: message` problems is `validate`.
"""

from __future__ import annotations

import ipaddress
import re
import string
import urllib.parse
from functools import cached_property, partial
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .. import pki, sizing, tuning
from ..errors import printable
from ..ipam import API_SERVICE_INDEX, DNS_SERVICE_INDEX, service_ip

# Patterns are whole-string matches: pydantic's (Rust) `$` is the end of the text, and Python
# code here uses re.fullmatch, so a trailing newline never passes.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
Label = Annotated[str, Field(pattern=DNS_LABEL)]
IPv4Net = ipaddress.IPv4Network
IPv4Addr = ipaddress.IPv4Address
ETCD_COUNTS = (1, 3, 5, 7)
AZURE_RESERVED_ASNS = {65515, 65517, 65518, 65519, 65520}

# Limits on what one environment file may make skyrack do (README, "Bad input").
MAX_FILE_BYTES = 8 << 20  # an explicit 20,000-node file is ~1 MiB
MAX_YAML_NODES = 500_000  # YAML nodes after expanding aliases (a 259-byte alias bomb expands to billions)
MAX_NODES = 20_000  # on-prem nodes, compact ranges expanded
MAX_PROBLEMS = 200  # problems listed per file; the rest are counted
BRIDGE_PATTERN = r"^[a-z][a-z0-9]{1,14}$"  # a Linux interface name (15 characters at most)

# Address ranges no field may use (or, for admin_cidrs, lie inside).
SPECIAL_RANGES = tuple((ipaddress.IPv4Network(n), what) for n, what in (
    ("0.0.0.0/8", "'this network' (0.0.0.0/8)"),
    ("127.0.0.0/8", "loopback (127.0.0.0/8)"),
    ("169.254.0.0/16", "link-local (169.254.0.0/16)"),
    ("224.0.0.0/4", "multicast (224.0.0.0/4)"),
    ("240.0.0.0/4", "reserved (240.0.0.0/4)"),
))


def special_range(net: IPv4Net, inside_only: bool = False) -> str | None:
    """What kind of unusable range `net` touches (or, inside_only, lies in); None when it is usable."""
    for special, what in SPECIAL_RANGES:
        if net.subnet_of(special) if inside_only else net.overlaps(special):
            return what
    return None


def _usable_net(value: IPv4Net, inside_only: bool = False) -> IPv4Net:
    what = special_range(value, inside_only)
    if what:
        raise ValueError(f"{value} is in the {what} range: not usable here")
    return value


def _usable_address(value: IPv4Addr) -> IPv4Addr:
    what = special_range(ipaddress.IPv4Network(value))
    if what:
        raise ValueError(f"{value} is a {what} address: not a host")
    return value


UsableNet = Annotated[IPv4Net, AfterValidator(_usable_net)]
HostAddr = Annotated[IPv4Addr, AfterValidator(_usable_address)]

_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*")
_URL_PATH = re.compile(r"(/([A-Za-z0-9._~:@+,=-]|%[0-9A-Fa-f]{2})*)*")


def _dns_name(value: str) -> str:
    if len(value) > 253 or not _DNS_NAME.fullmatch(value):
        raise ValueError(f"{printable(value)[:80]!r} is not a DNS name (lower-case labels of a-z, 0-9 and '-', "
                         "joined by dots)")
    return value


def _url(value: str, schemes: tuple[str, ...], trailing_slash: bool = True) -> str:
    """A URL as a mirror's address: one of `schemes`, a host (name or IPv4), an optional port, a plain path.

    No credentials, query, fragment, spaces, quotes or braces: the value lands in apt, containerd
    and Ansible configuration unescaped, so it must be nothing but an address."""
    shown = printable(value)[:120]
    bad = ValueError(f"{shown!r} is not a URL of the form {'|'.join(schemes)}://<host>[:port][/path]")
    if len(value) > 2048 or printable(value) != value or " " in value:
        raise bad
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError:
        raise bad from None
    if parts.scheme not in schemes or parts.query or parts.fragment or "?" in value or "#" in value:
        raise bad
    if not _URL_PATH.fullmatch(parts.path) or (not trailing_slash and parts.path.endswith("/")):
        raise bad
    if parts.scheme == "file":
        if parts.netloc or not parts.path.startswith("/"):
            raise bad
        return value
    if "@" in parts.netloc:
        raise ValueError(f"{shown!r}: credentials do not belong in the environment file")
    host = parts.hostname or ""
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        if not _DNS_NAME.fullmatch(host) or len(host) > 253:
            raise bad from None
    if port is not None and not 1 <= port <= 65535:
        raise bad
    if parts.netloc != (host + (f":{port}" if port is not None else "")):
        raise bad  # upper case, an empty port, or anything else urlsplit would normalise
    return value


DnsName = Annotated[str, AfterValidator(_dns_name)]
LINK_LOCAL = ipaddress.IPv4Network("169.254.0.0/16")
# 169.254.0.0/24 and 169.254.255.0/24 are reserved (RFC 3927); 169.254.169.0/24 holds the clouds'
# metadata (169.254.169.254) and DNS (169.254.169.253) addresses
LINK_LOCAL_RESERVED = (ipaddress.IPv4Network("169.254.0.0/24"), ipaddress.IPv4Network("169.254.255.0/24"),
                       ipaddress.IPv4Network("169.254.169.0/24"))
VmSize = Annotated[str, Field(pattern=r"^[A-Za-z0-9_]{1,64}$")]


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
    location: Annotated[str, Field(pattern=r"^[a-z0-9]{1,40}$")]
    zones: list[Literal["1", "2", "3"]] = Field(default_factory=lambda: ["1", "2", "3"])
    vnet_cidr: UsableNet
    # Public addresses (offices, VPN egress) allowed through the Key Vault and Storage firewalls.
    # A private range here is read as an operator network (the field's old second meaning).
    admin_cidrs: list[Annotated[IPv4Net, AfterValidator(partial(_usable_net, inside_only=True))]] = Field(
        default_factory=list)
    # Private operator networks reaching the API server (6443) over the VPN; replies are routed back to them.
    operator_cidrs: list[Annotated[IPv4Net, AfterValidator(partial(_usable_net, inside_only=True))]] = Field(
        default_factory=list)
    resource_group: Annotated[str, Field(pattern=r"^[-A-Za-z0-9_.()]{1,90}$")] | None = None

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
    count: Annotated[StrictInt, Field(ge=1, le=9)] = 3
    vm_size: VmSize = "auto"


# kubeadm refuses an external etcd older than this (its MinExternalEtcdVersion in 1.36 and 1.37).
ETCD_MINIMUM = (3, 5, 24)


class Etcd(Strict):
    count: StrictInt = 3
    vm_size: VmSize = "auto"
    events_cluster: StrictBool = False
    quota_backend_gib: Annotated[StrictInt, Field(ge=1, le=64)] = 8
    # The hour (UTC) at which each member defragments itself, minutes apart (render.cloud_init.etcd_defrag_time).
    defrag_hour_utc: Annotated[StrictInt, Field(ge=0, le=23)] = 3
    # The etcd-server/etcd-client release the site's Kubernetes repository serves (the lab builds it).
    version: Annotated[str, Field(pattern=r"^3\.([0-9]{1,2})\.([0-9]{1,3})$")] = "3.6.16"

    @field_validator("version")
    @classmethod
    def _supported_etcd(cls, v: str) -> str:
        if tuple(int(x) for x in v.split(".")) < ETCD_MINIMUM:
            raise ValueError(f"etcd {v} is older than {'.'.join(map(str, ETCD_MINIMUM))}, the oldest external "
                             "etcd kubeadm accepts")
        return v

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
    # How long a VM's first boot (control plane and cloud pools) keeps retrying what needs the site (DNS, the
    # mirrors, a quorate etcd for kubeadm init, the API server for a join) before it reports FAILED.
    boot_deadline_minutes: Annotated[StrictInt, Field(ge=1, le=24 * 60)] = 30


class Certificates(Strict):
    """How long what kubeadm makes on an API server lives, and when skyrack-certs-renew renews it.

    Applies to kubeadm's certificates and kubeconfigs (apiserver-kubelet-client, front-proxy-client,
    admin, super-admin, controller-manager, scheduler) and, as the controller manager's signing
    duration, to every kubelet's client certificate (which kubelets rotate themselves). Minutes, so a
    lab can prove renewal in minutes; production keeps kubeadm's year and renews a month ahead."""

    validity_minutes: Annotated[StrictInt, Field(ge=5, le=5 * 365 * 24 * 60)] = 365 * 24 * 60
    renew_before_minutes: Annotated[StrictInt, Field(ge=1)] = 30 * 24 * 60

    @model_validator(mode="after")
    def _window(self) -> Certificates:
        if self.renew_before_minutes >= self.validity_minutes:
            raise ValueError(f"renew_before_minutes ({self.renew_before_minutes}) must be less than "
                             f"validity_minutes ({self.validity_minutes}): every check would renew again")
        return self

    @property
    def check_every_s(self) -> int:
        """How often each API server checks: a fifth of the renewal window, between a minute and 12 hours
        (so a renewal that fails is tried about five times before anything expires)."""
        return max(60, min(12 * 3600, self.renew_before_minutes * 60 // 5))


class Kubernetes(Strict):
    version: Annotated[str, Field(pattern=r"^1\.([0-9]{1,3})\.([0-9]{1,4})$")]  # ASCII digits: \d is Unicode
    # The containerd release every node installs from the site's Kubernetes repository (Kubernetes 1.36 and
    # later support containerd 2.x only).
    containerd: Annotated[str, Field(pattern=r"^2\.([0-9]{1,2})\.([0-9]{1,3})$")] = "2.4.2"
    # kubelet 1.35+ refuses to start on a cgroup v1 host (failCgroupV1). Real nodes run cgroup v2; only a
    # lab whose host is still cgroup v1 sets this (README: "Why the lab allows cgroup v1").
    allow_cgroup_v1: StrictBool = False
    service_cidr: UsableNet = ipaddress.IPv4Network("10.96.0.0/12")
    pod_cidr: UsableNet
    pods_per_node: Annotated[StrictInt, Field(ge=8, le=250)] = 32
    cluster_domain: DnsName = "cluster.local"
    # Every node's DNS cache answers here (a link-local address on the node's loopback, made by the kubelet
    # role and the VMs' user-data) and kubelet gives it to every pod as its resolver: upstream NodeLocal
    # DNSCache's address. Link-local, so it never leaves the node; not a cloud metadata address.
    node_dns_ip: ipaddress.IPv4Address = ipaddress.IPv4Address("169.254.20.10")
    certificates: Certificates = Certificates()

    _cidrs = field_validator("service_cidr", "pod_cidr", mode="before")(_network)

    @field_validator("node_dns_ip", mode="before")
    @classmethod
    def _node_dns_ip(cls, v: object) -> ipaddress.IPv4Address:
        if not isinstance(v, str):
            raise ValueError("expected an IPv4 address as a string, e.g. 169.254.20.10")
        try:
            ip = ipaddress.IPv4Address(v)
        except ValueError:
            raise ValueError(f"{v!r} is not an IPv4 address") from None
        if ip not in LINK_LOCAL or any(ip in net for net in LINK_LOCAL_RESERVED):
            raise ValueError(f"{ip} is not a usable link-local address: use one in 169.254.1.0-169.254.254.255 "
                             "that is not a cloud's metadata or DNS address (169.254.169.0/24), e.g. 169.254.20.10")
        return ip

    @field_validator("service_cidr")
    @classmethod
    def _service_size(cls, v: IPv4Net) -> IPv4Net:
        if v.prefixlen < 12:
            raise ValueError(f"{v} is larger than /12, the largest service range kube-apiserver accepts")

        if v.num_addresses <= max(API_SERVICE_INDEX, DNS_SERVICE_INDEX):
            raise ValueError(f"{v} is too small: the service range must hold the API service IP "
                             f"({service_ip(v, API_SERVICE_INDEX)}) and the cluster DNS IP (the {DNS_SERVICE_INDEX}th "
                             "address); use /28 or larger")
        return v

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])


class Hardware(Strict):
    """A node's size: kubelet's reservations and eviction thresholds follow from it (skyrack.tuning)."""

    cpus: Annotated[StrictInt, Field(ge=1, le=4096)]  # logical CPUs, as the node reports them
    memory_gib: Annotated[StrictInt, Field(ge=1, le=65536)]

    @property
    def reservation(self) -> tuning.Reservation:
        return tuning.kubelet_reservation(self.cpus, self.memory_gib)

    @model_validator(mode="after")
    def _room_for_pods(self) -> Hardware:
        self.reservation  # noqa: B018 - ValueError (named after this field) when the node is too small
        return self


class CloudPool(Strict):
    name: Label
    vm_size: VmSize
    min: Annotated[StrictInt, Field(ge=0)] = 0
    max: Annotated[StrictInt, Field(ge=1, le=1000)]
    # Only for a size skyrack cannot size itself (sizing.vm_hardware); otherwise it comes from vm_size.
    hardware: Hardware | None = None

    @model_validator(mode="after")
    def _bounds(self) -> CloudPool:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        if self.hardware is None:
            known = sizing.vm_hardware(self.vm_size)
            if known is None:
                raise ValueError(f"skyrack does not know the size of {self.vm_size}: give the pool "
                                 "`hardware: {cpus: N, memory_gib: N}` so its kubelets reserve what it needs")
            tuning.kubelet_reservation(*known)
        return self

    @property
    def reservation(self) -> tuning.Reservation:
        hw = self.hardware
        return hw.reservation if hw else tuning.kubelet_reservation(*sizing.vm_hardware(self.vm_size))  # type: ignore[misc]


class Vpn(Strict):
    peer_ip: HostAddr
    asn: Annotated[StrictInt, Field(ge=1, le=4294967294)] | None = None
    bgp_peer_ip: HostAddr | None = None  # the device's private BGP address; required with `asn`

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
    cidrs: Annotated[list[UsableNet], Field(min_length=1)]
    vpn: Vpn | None = None

    @field_validator("cidrs", mode="before")
    @classmethod
    def _nets(cls, v: Any) -> Any:
        return [_network(x) for x in v] if isinstance(v, list) else v


def _site_ca(value: Any, info: ValidationInfo) -> str:
    """`mirrors.ca`: PEM text, or the path of a PEM file (relative to the environment file's directory).

    Read here, once: the model holds the checked PEM, never a path, so every consumer renders the same text."""
    if not isinstance(value, str):
        raise ValueError("expected PEM text or the path of a PEM file")
    if value.lstrip().startswith("-----BEGIN"):
        return pki.ca_bundle(value)
    if printable(value) != value or "\n" in value or not value.strip():
        raise ValueError(f"'{printable(value)[:80]}' is neither PEM text nor a file's path")
    path = Path(value)
    context = info.context or {}
    if not path.is_absolute():
        if context.get("read") is not None:  # the file at a revision under review (`skyrack diff`), not on disk
            text = context["read"](value)
            if text is None:
                raise ValueError(f"{value}: no such file beside the environment file at that revision")
            return pki.ca_bundle(text)
        if context.get("base_dir") is None:
            raise ValueError(f"{value}: a relative path, with no environment file to be relative to")
        path = Path(context["base_dir"]) / path
    try:
        if path.stat().st_size > pki.MAX_CA_BUNDLE:
            raise ValueError(f"{path}: larger than {pki.MAX_CA_BUNDLE // 1024} KiB; a CA bundle is a few certificates")
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        hint = " (the lab's site CA: `skyrack lab up` or `./dev setup` creates it)" if str(path).startswith(
            "/var/lib/skyrack/lab/") else ""
        raise ValueError(f"{path}: no such file{hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read as PEM text ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        return pki.ca_bundle(text)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


class Mirrors(Strict):
    """Where nodes get packages. Racks have no internet access either."""

    # The site's CA bundle: every VM and rack node trusts it before its first fetch (cloud-init `ca_certs`,
    # the os_baseline role), so HTTPS mirrors with the site's own certificates verify (apt, curl, containerd).
    ca: Annotated[str, AfterValidator(_site_ca)] | None = None

    apt_proxy: Annotated[str, AfterValidator(partial(_url, schemes=("http", "https")))] | None = None
    kubernetes: Annotated[str, AfterValidator(partial(_url, schemes=("http", "https", "file")))] | None = None
    # A registry mirror every node pulls through (containerd `hosts.toml`): images keep their
    # upstream names, the mirror serves `<upstream registry>/<repository>` under its own /v2/.
    registry: Annotated[str, AfterValidator(partial(_url, schemes=("http", "https"), trailing_slash=False))] | None = None

    @property
    def kubernetes_host(self) -> str | None:
        """The Kubernetes repository's host (None for none or a file:// one): apt reaches it directly, as curl
        fetches its key, never through `apt_proxy` (an HTTPS source through it would need CONNECT)."""
        return urllib.parse.urlsplit(self.kubernetes).hostname if self.kubernetes else None


class Team(Strict):
    name: Label
    gpu_quota: Annotated[StrictInt, Field(ge=0)] | None = None


class Gpu(Strict):
    model: Annotated[str, Field(pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,62}$")]  # a label value
    count: Annotated[StrictInt, Field(ge=0, le=16)] = 8
    vendor: Literal["nvidia"] = "nvidia"


class Node(Strict):
    name: Label
    ip: HostAddr


class NodeRange(Strict):
    """Compact form for a rack of many nodes: ``{count: 64, first_ip: 10.64.1.11}``.

    Names come from ``name`` (a Python format string with ``{rack}`` and ``{index}``),
    addresses are consecutive from ``first_ip``.
    """

    count: Annotated[StrictInt, Field(ge=1, le=4096)]
    first_ip: HostAddr
    name: str = "{rack}-n{index:02d}"
    start: Annotated[StrictInt, Field(ge=0, le=1_000_000)] = 1

    @field_validator("name")
    @classmethod
    def _pattern(cls, v: str) -> str:
        name_pattern(v)
        return v

    def node_name(self, rack: str, index: int) -> str:
        return self.name.format(rack=rack, index=index)


_INDEX_SPEC = re.compile(r"(0[1-9])?d?")


def name_pattern(pattern: str) -> None:
    """A node-name pattern is literal DNS-label text with `{rack}` and `{index}` (or `{index:0Nd}`, N <= 9)
    and nothing else: no other fields, conversions or widths that could make names unbounded."""
    hint = "use literal a-z, 0-9, '-' with {rack} and {index} (e.g. '{rack}-n{index:02d}')"
    try:
        parts = list(string.Formatter().parse(pattern))
    except ValueError as exc:
        raise ValueError(f"bad name pattern {printable(pattern)[:80]!r} ({exc}); {hint}") from None
    has_index = False
    for literal, field, spec, conversion in parts:
        if not re.fullmatch(r"[a-z0-9-]*", literal):
            raise ValueError(f"bad name pattern {printable(pattern)[:80]!r}: {printable(literal)[:40]!r}; {hint}")
        if field is None:
            continue
        if conversion is not None or field not in ("rack", "index") or (
                field == "rack" and spec) or (field == "index" and not _INDEX_SPEC.fullmatch(spec or "")):
            raise ValueError(f"bad name pattern {printable(pattern)[:80]!r}: field {{{printable(field)}}}; {hint}")
        has_index = has_index or field == "index"
    if not has_index:
        raise ValueError(f"bad name pattern {printable(pattern)[:80]!r}: it has no {{index}}, so every node would "
                         f"get the same name; {hint}")


class Rack(Strict):
    name: Label
    team: Label | None = None
    gpu: Gpu | None = None
    nodes: list[Node] = Field(default_factory=list)
    node_range: NodeRange | None = None
    # The L2 segment (VLAN) of the rack's nodes: racks naming the same one route each other's pod
    # ranges directly; by default a rack is a segment of its own and other racks are reached
    # through the site's gateway (docs/join.md, pod networking).
    segment: Label | None = None
    # Each node's size: kubelet's reservations and eviction thresholds follow from it (skyrack.tuning).
    # Without it kubelet reserves nothing, and `check` flags that for production and staging.
    hardware: Hardware | None = None

    @property
    def l2_segment(self) -> str:
        return self.segment or self.name

    @model_validator(mode="after")
    def _has_nodes(self) -> Rack:
        if not self.nodes and self.node_range is None:
            raise ValueError("a rack needs `nodes` (a list) or `node_range` (count and first_ip)")
        return self


class ExecutionNode(Strict):
    name: Label  # its Receptor node ID
    racks: Annotated[list[Label], Field(min_length=1)]


class Execution(Strict):
    """Where rack runs go with `skyrack join --via receptor`: the controller's Receptor control
    socket, and which execution node (a Receptor node running `ansible-runner worker`) serves which racks."""

    receptor_socket: Annotated[str, Field(pattern=r"^/[^\x00-\x1f]{1,200}$")] = "/run/receptor/receptor.sock"
    # host:port of the controller's Receptor TCP listener, which execution nodes dial (their user-data)
    controller: Annotated[str, Field(pattern=r"^[A-Za-z0-9.-]{1,253}:[0-9]{1,5}$")] | None = None
    nodes: Annotated[list[ExecutionNode], Field(min_length=1)]


class Join(Strict):
    """How `skyrack join` rolls out across racks, unless its command line says otherwise (docs/join.md)."""

    parallel: Annotated[StrictInt, Field(ge=1, le=256)] = 1  # racks at once (after the canary)
    canary: StrictBool = True  # the first rack alone first; its failure starts no other rack
    # kubeadm joins the control plane is given per minute (each one is a CSR, a Node and its leases)
    joins_per_minute: Annotated[StrictInt, Field(ge=1, le=100_000)] = 200
    # A node that leaves (removed from the file, or re-addressed) is drained first (kube/drain.py):
    # the whole drain's deadline, and how long a gang on it may run on before it is evicted whole.
    drain_timeout_minutes: Annotated[StrictInt, Field(ge=1, le=1440)] = 15
    gang_wait_minutes: Annotated[StrictInt, Field(ge=0, le=10080)] = 0
    # A rack's nodes behind kubernetes.version are upgraded in batches of this size (join/upgrade.py), as
    # Ansible's `serial`: a count or a share of the rack's nodes behind, the last repeating until all are done.
    upgrade_serial: Annotated[list[StrictInt | StrictStr], Field(min_length=1, max_length=16)] = Field(
        default_factory=lambda: [1, "20%"])

    @field_validator("upgrade_serial")
    @classmethod
    def _batch_sizes(cls, v: list[int | str]) -> list[int | str]:
        for i, size in enumerate(v):
            if (isinstance(size, int) and not 1 <= size <= 100_000) or (isinstance(size, str) and not re.fullmatch(
                    r"([1-9][0-9]?|100)%", size)):
                raise ValueError(f"item {i} ({size!r}) is neither a number of nodes (1 to 100000) nor a share of "
                                 "the rack's (1% to 100%)")
        return v


class Backups(Strict):
    container: Label = "etcd-snapshots"
    interval_minutes: Annotated[StrictInt, Field(ge=5, le=1440)] = 60
    retention_days: Annotated[StrictInt, Field(ge=1, le=365)] = 14


class Lab(Strict):
    """Present only for the local lab: nodes are systemd-nspawn containers on this host."""

    bridge: Annotated[str, Field(pattern=BRIDGE_PATTERN)] = "skyrack0"
    subnet: UsableNet = ipaddress.IPv4Network("198.18.0.0/24")
    suite: Annotated[str, Field(pattern=r"^[a-z]{2,20}$")] = "bookworm"

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
    join: Join = Join()
    execution: Execution | None = None
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
                    name = rng.node_name(rack.name, rng.start + k)
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


# ----------------------------------------------------------------------------- the cluster layer
# Read by skyrack.kube (pulumi-kubernetes): what the batch cluster on top of the control plane
# looks like. Every field has a default, so an environment file without `cluster:` is valid.

Quantity = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P)?$")]
ImageRef = Annotated[str, Field(
    pattern=r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$")]


class Balloon(Strict):
    """Low-priority placeholder pods that hold capacity for a team until real work preempts them."""

    replicas: Annotated[StrictInt, Field(ge=0, le=10000)] = 0
    gpus: Annotated[StrictInt, Field(ge=0, le=16)] = 8  # per pod: 8 holds a whole GPU node
    cpu: Quantity = "1"
    memory: Quantity = "1Gi"


# The priority classes a team's pods may name (skyrack.kube.batch creates them; the balloons' own class is for
# the balloons alone). Deadline work (`skyrack-high`) preempts other teams' jobs: a team gets it by name.
TeamPriorityClass = Literal["skyrack-preemptible", "skyrack-normal", "skyrack-high"]
DEFAULT_TEAM_PRIORITY_CLASSES: tuple[TeamPriorityClass, ...] = ("skyrack-preemptible", "skyrack-normal")


class ContainerDefaults(Strict):
    """What a container of a team's that asks for nothing is given (a LimitRange's defaultRequest): with a cpu or
    memory quota the API server refuses a pod without requests, and a pod with none is a guess to the scheduler."""

    cpu: Quantity = "100m"
    memory: Quantity = "256Mi"


class TeamLayer(Strict):
    """A team's share of the cluster beyond `teams[].gpu_quota` (None = no limit on that resource)."""

    container_defaults: ContainerDefaults = ContainerDefaults()
    # the Pod Security Standard the API server enforces on the team's namespace: `baseline` refuses privileged
    # containers, host namespaces, hostPath and added capabilities (a way round every other isolation, GPUs
    # included); `restricted` also wants non-root, seccomp and no privilege escalation in every pod
    pod_security: Literal["baseline", "restricted"] = "baseline"
    cpu: Quantity | None = None
    memory: Quantity | None = None
    pods: Annotated[StrictInt, Field(ge=1)] | None = None
    balloon: Balloon = Balloon()
    # enforced by the API server (skyrack.kube.isolation); a pod naming no class gets skyrack-normal
    priority_classes: list[TeamPriorityClass] = Field(default_factory=lambda: list(DEFAULT_TEAM_PRIORITY_CLASSES))

    @field_validator("priority_classes")
    @classmethod
    def _normal_is_allowed(cls, v: list[str]) -> list[str]:
        if "skyrack-normal" not in v:
            raise ValueError("must include skyrack-normal: it is the class of every pod that names none")
        if len(set(v)) != len(v):
            raise ValueError(f"a class is listed twice: {v}")
        return v


class Autoscaler(Strict):
    """cluster-autoscaler for the cloud pools (Azure VM scale sets)."""

    max_scale_down_share: Annotated[StrictFloat, Field(gt=0, le=0.5)] = 0.1
    scale_down_unneeded_minutes: Annotated[StrictInt, Field(ge=1, le=1440)] = 10
    scale_down_delay_after_add_minutes: Annotated[StrictInt, Field(ge=0, le=1440)] = 10
    max_graceful_termination_seconds: Annotated[StrictInt, Field(ge=0, le=86400)] = 600


class GpuHealth(Strict):
    interval_seconds: Annotated[StrictInt, Field(ge=30, le=86400)] = 300


class Versions(Strict):
    """Every image the cluster layer runs, pinned in one place per environment.

    kube-proxy is not listed: it always runs the environment's `kubernetes.version`.
    """

    coredns: ImageRef = "registry.k8s.io/coredns/coredns:v1.14.6"
    pause: ImageRef = "registry.k8s.io/pause:3.10.2"
    nvidia_device_plugin: ImageRef = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    dcgm_exporter: ImageRef = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"
    gpu_health_check: ImageRef = "nvcr.io/nvidia/cuda:12.6.3-base-ubuntu22.04"
    kubectl: ImageRef = "docker.io/alpine/k8s:1.37.2"  # the GPU health check's tainter: needs sh and kubectl
    prometheus: ImageRef = "quay.io/prometheus/prometheus:v3.16.0"  # upstream.PROMETHEUS_IMAGE
    cluster_autoscaler: ImageRef = "registry.k8s.io/autoscaling/cluster-autoscaler:v1.37.0"


class ClusterLayer(Strict):
    bootstrap_token_ttl_hours: Annotated[StrictInt, Field(ge=1, le=24 * 30)] = 24
    teams: dict[str, TeamLayer] = Field(default_factory=dict)
    autoscaler: Autoscaler = Autoscaler()
    gpu_health: GpuHealth = GpuHealth()
    prometheus_retention_days: Annotated[StrictInt, Field(ge=1, le=365)] = 15
    versions: Versions = Versions()
