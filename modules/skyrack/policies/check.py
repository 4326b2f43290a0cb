"""`skyrack check`: the policy rules applied to an environment's plan.

Each rule has an id, a severity (error fails the check, warning is reported), what it
protects and how to fix a violation; a rule may report one violation at warning
severity instead (a third item), as the version rule does outside production and
staging. A rule registered `dated` is also given the day the check runs (`run`'s
`today`). The logic that the Pulumi policy pack shares lives in `rules`; this module
only feeds it from the plan.
"""

from __future__ import annotations

import bisect
import datetime as dt
import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from .. import config
from ..errors import InputError
from ..plan import Plan
from . import rules

# (field in the environment file, what is wrong[, severity when not the rule's own])
Violation = tuple[str, str] | tuple[str, str, str]


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str  # error | warning
    summary: str
    fix: str
    evaluate: Callable[..., Iterable[Violation]]  # (plan), or (plan, today) when dated
    dated: bool = False


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    field: str
    message: str
    fix: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


RULES: list[Rule] = []


def rule(id: str, summary: str, fix: str, severity: str = "error", dated: bool = False):
    def register(fn: Callable[..., Iterable[Violation]]) -> Callable[..., Iterable[Violation]]:
        RULES.append(Rule(id, severity, summary, fix, fn, dated))
        return fn
    return register


def run(plan: Plan, today: dt.date | None = None) -> list[Finding]:
    """Every rule on one plan on `today` (default: today's UTC date); findings in rule order."""
    day = today or rules.utc_today()
    return [Finding(r.id, severity[0] if severity else r.severity, field, message, r.fix)
            for r in RULES for field, message, *severity in (r.evaluate(plan, day) if r.dated else r.evaluate(plan))]


# ----------------------------------------------------------------------------- the rules


def _zones(plan: Plan, role: str) -> set[str]:
    return {m.zone for m in plan.members_of(role) if m.zone is not None}


@rule("production-etcd-quorum",
      "production: etcd (and the events etcd) has >= 3 members in >= 3 zones",
      "set control_plane.etcd.count to 3 or 5 and azure.zones to three zones")
def _etcd_quorum(plan: Plan) -> Iterable[Violation]:
    if plan.env.tier != "production":
        return
    roles = ("etcd", "etcd-events") if plan.env.control_plane.etcd.events_cluster else ("etcd",)
    for role in roles:
        members, zones = len(plan.members_of(role)), len(_zones(plan, role))
        if members < 3:
            yield "control_plane.etcd.count", f"{role} has {members} member(s): losing one loses quorum"
        elif zones < 3:
            yield "azure.zones", f"{role}'s {members} members span {zones} zone(s): losing a zone loses quorum"


@rule("production-apiserver-redundancy",
      "production: >= 2 API servers in >= 2 zones",
      "set control_plane.apiservers.count to 2 or more and list at least two azure.zones")
def _apiservers(plan: Plan) -> Iterable[Violation]:
    if plan.env.tier != "production":
        return
    members, zones = len(plan.members_of("apiserver")), len(_zones(plan, "apiserver"))
    if members < 2:
        yield "control_plane.apiservers.count", f"{members} API server: replacing or losing it stops the cluster"
    elif zones < 2:
        yield "azure.zones", f"the {members} API servers share one zone: a zone outage stops the cluster"


def plan_grants(plan: Plan) -> list[tuple[str, rules.Grant]]:
    """(field, grant): the inbound traffic the control plane's design admits from outside it."""
    env = plan.env
    api = ipaddress.IPv4Network(plan.subnets["apiservers"])
    port = ((rules.APISERVER_PORT, rules.APISERVER_PORT),)
    sources = [(f"azure.admin_cidrs[{i}]", "admin range", c) for i, c in enumerate(env.azure.admin_cidrs)]
    sources += [(f"onprem.cidrs[{i}]", "on-prem range", c) for i, c in enumerate(env.onprem.cidrs)]
    sources += [(f"cloud_pools[{i}]", f"cloud pool {pool.name}'s subnet", ipaddress.IPv4Network(pool.pod_cidr))
                for i, pool in enumerate(plan.pools)]
    return [(field, rules.Grant(label, net, api, port)) for field, label, net in sources]


def _control_plane_nets(plan: Plan, roles: Iterable[str]) -> list[ipaddress.IPv4Network]:
    return [ipaddress.IPv4Network(plan.subnets[r]) for r in roles if r in plan.subnets]


@rule("etcd-isolated",
      "etcd is reachable only from the control plane: no admin, on-prem or pool range includes an etcd subnet",
      "narrow the range so that it excludes the control plane's subnets (see `skyrack plan`)")
def _etcd_isolated(plan: Plan) -> Iterable[Violation]:
    etcd = _control_plane_nets(plan, ("etcd", "etcd-events"))
    inside = _control_plane_nets(plan, ("apiservers", "etcd", "etcd-events"))
    for field, grant in plan_grants(plan):
        for message in rules.etcd_exposure([grant], etcd, inside):
            yield field, message


@rule("apiserver-not-public",
      f"the API server is not open to the internet (no admin range broader than a public "
      f"/{rules.BROADEST_PUBLIC_PREFIX})",
      "list the offices' and VPN egress ranges in azure.admin_cidrs instead")
def _apiserver_public(plan: Plan) -> Iterable[Violation]:
    for field, grant in plan_grants(plan):
        for message in rules.apiserver_exposure([grant]):
            yield field, message


@rule("gpu-quota-within-racks",
      "a team's GPU quota does not exceed the GPUs it can be scheduled on (its racks and unassigned racks)",
      "lower teams[].gpu_quota or give the team racks")
def _gpu_quota(plan: Plan) -> Iterable[Violation]:
    per_team: dict[str | None, int] = {}
    for node in plan.nodes:
        per_team[node.team] = per_team.get(node.team, 0) + node.gpu_count
    shared = per_team.get(None, 0)
    total = sum(per_team.values())
    quota_sum = 0
    for i, team in enumerate(plan.env.teams):
        if team.gpu_quota is None:
            continue
        quota_sum += team.gpu_quota
        usable = per_team.get(team.name, 0) + shared
        if team.gpu_quota > usable:
            yield (f"teams[{i}].gpu_quota",
                   f"team {team.name} has a quota of {team.gpu_quota:,} GPUs but can be scheduled on {usable:,}")
    if quota_sum > total:
        yield "teams", f"quotas add up to {quota_sum:,} GPUs but the racks hold {total:,}"


@rule("pod-range-fits-pods",
      "every node's pod range holds kubernetes.pods_per_node addresses",
      "run `skyrack plan` to re-allocate, or lower kubernetes.pods_per_node")
def _pod_ranges(plan: Plan) -> Iterable[Violation]:
    want = plan.max_pods
    small: list[str] = []
    for node in plan.nodes:
        size = 2 ** (32 - int(node.pod_cidr.rsplit("/", 1)[1]))
        if size < want:
            small.append(f"{node.name} ({node.pod_cidr})")
    if small:
        shown = ", ".join(small[:5]) + (f" and {len(small) - 5} more" if len(small) > 5 else "")
        yield "kubernetes.pods_per_node", f"{len(small)} node pod range(s) hold fewer than {want} addresses: {shown}"


# The tiers an unsupported Kubernetes minor fails; the others get a warning.
VERSION_ENFORCED_TIERS = ("production", "staging")


@rule("racks-declare-hardware",
      "production and staging: every rack declares its nodes' `hardware` (cpus, memory_gib), from which kubelet's "
      "reservations and eviction thresholds follow (skyrack.tuning); without it a whole-node pod can starve "
      "kubelet and containerd",
      "add `hardware: {cpus: N, memory_gib: N}` to the rack: the logical CPUs and memory one of its nodes reports")
def _hardware(plan: Plan) -> Iterable[Violation]:
    if plan.env.tier not in VERSION_ENFORCED_TIERS:
        return
    for i, rack in enumerate(plan.env.racks):
        if rack.hardware is None:
            yield f"racks[{i}].hardware", f"rack {rack.name} declares no hardware: its kubelets reserve nothing"


@rule("kubernetes-version-supported",
      f"kubernetes.version's minor is supported upstream on the day of the check (released, not past its end "
      f"of life: KUBERNETES_RELEASES, 1.{min(rules.KUBERNETES_RELEASES)} to 1.{max(rules.KUBERNETES_RELEASES)}): "
      f"an error in {' and '.join(VERSION_ENFORCED_TIERS)}, a warning in other tiers and "
      f"{rules.EOL_WARNING_DAYS} days before the end of life",
      "upgrade one minor version at a time (each step a reviewed PR) towards the minor the message names",
      dated=True)
def _version(plan: Plan, today: dt.date) -> Iterable[Violation]:
    problem = rules.kubernetes_version_problem(plan.env.kubernetes.version, today)
    if problem:
        enforced = problem.unsupported and plan.env.tier in VERSION_ENFORCED_TIERS
        yield "kubernetes.version", problem.message, "error" if enforced else "warning"


@rule("kubernetes-mirror-matches-version",
      "a Kubernetes package repository pinned to a minor version (…/v1.NN/…) serves kubernetes.version's minor: "
      "mirrors.kubernetes, or the stack setting skyrack:kubernetesAptRepo (configs/Pulumi.<env>.yaml) without it",
      "point the repository at the new minor version in the same PR")
def _mirror(plan: Plan) -> Iterable[Violation]:
    url, field = plan.env.mirrors.kubernetes, "mirrors.kubernetes"
    if not url:
        url, field = stack_setting(plan, "skyrack:kubernetesAptRepo"), f"{stack_file(plan).name}: skyrack:kubernetesAptRepo"
    pinned = re.search(r"/v1\.(\d+)(/|$)", url or "")
    if pinned and int(pinned.group(1)) != plan.env.kubernetes.minor:
        yield (field, f"{url} serves 1.{pinned.group(1)} packages but kubernetes.version is "
                      f"{plan.env.kubernetes.version}: nodes would not find them")


@rule("mirrors-https",
      f"in {' and '.join(VERSION_ENFORCED_TIERS)}, every mirror is HTTPS: over plain HTTP anyone on the path "
      "can substitute images (a tag is not a digest) and read what a site installs; apt's signatures cover "
      "packages only; a warning in other tiers",
      "serve the mirror over HTTPS with a certificate of the site's CA and set mirrors.ca to that CA")
def _mirrors_https(plan: Plan) -> Iterable[Violation]:
    severity = "error" if plan.env.tier in VERSION_ENFORCED_TIERS else "warning"
    for field in config.semantics.MIRROR_FIELDS:
        url = getattr(plan.env.mirrors, field)
        if url and url.startswith("http://"):
            yield f"mirrors.{field}", f"{url} is plain HTTP", severity


def stack_file(plan: Plan) -> Path:
    """The Pulumi stack settings beside the environment file (`stackConfigDir: configs`)."""
    return Path(plan.source).with_name(f"Pulumi.{plan.env.name}.yaml")


def stack_setting(plan: Plan, key: str) -> str | None:
    """A plain (not secret) value of the stack settings, if the file and the key are there."""
    path = stack_file(plan)
    try:
        data = yaml.safe_load(path.read_text()) if path.is_file() else None
    except yaml.YAMLError:
        return None  # Pulumi reports its own file; the rule only reads what it can
    value = ((data or {}).get("config") or {}).get(key) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


# ----------------------------------------------------------------------------- environments of one repository

def _neighbours(plan: Plan) -> list[tuple[Path, config.Environment]]:
    """The other environment files beside this one (its repository's `configs/`), each loaded and valid; files
    that are not environment files (Pulumi's settings, locks, a broken file that its own check reports) are
    skipped. None for a plan not read from a file on disk (a revision under review)."""
    source = Path(str(plan.source))
    if not source.is_file():
        return []
    out = []
    for path in sorted(source.parent.glob("*.yaml")):
        if path.resolve() == source.resolve() or path.name.startswith("Pulumi.") or path.name.endswith(".lock.yaml"):
            continue
        try:
            env = config.load(path)
        except InputError:
            continue
        if env.name != plan.env.name:
            out.append((path, env))
    return out


def _routed(env: config.Environment) -> list[tuple[str, ipaddress.IPv4Network]]:
    """(field, range) of what an environment puts on the network it shares with the site: its Azure
    network, its pods' addresses, its on-prem nodes."""
    nets = [("azure.vnet_cidr", env.azure.vnet_cidr), ("kubernetes.pod_cidr", env.kubernetes.pod_cidr)]
    return nets + [(where, ipaddress.IPv4Network(node.ip)) for _, node, where in env.rack_nodes]


def _same_site(a: config.Environment, b: config.Environment) -> bool:
    return any(x.overlaps(y) for x in a.onprem.cidrs for y in b.onprem.cidrs) or bool(
        a.onprem.vpn and b.onprem.vpn and a.onprem.vpn.peer_ip == b.onprem.vpn.peer_ip)


@rule("environments-disjoint",
      "environments of one repository that reach the same site (their onprem.cidrs overlap) route nothing "
      "twice: their Azure networks, pod ranges and on-prem node addresses are disjoint, and each has its own "
      "VPN peer",
      "give each environment its own ranges (a dev beside prod: another VNet, pod range and rack addresses) "
      "and its own on-prem VPN device address")
def _disjoint(plan: Plan) -> Iterable[Violation]:
    env = plan.env
    mine = _routed(env)
    for path, other in _neighbours(plan):
        if not _same_site(env, other):
            continue
        nets = [(f, n) for f, n in _routed(other) if n.prefixlen < 32]
        hosts = sorted((int(n.network_address), f) for f, n in _routed(other) if n.prefixlen == 32)
        at = [ip for ip, _ in hosts]
        seen: dict[str, list[str]] = {}  # one finding per field (per rack) of this file, naming the first clashes
        for field, net in mine:
            lo, hi = int(net.network_address), int(net.broadcast_address)
            hits = [f for f, n in nets if n.overlaps(net)]
            hits += [f for _, f in hosts[bisect.bisect_left(at, lo):bisect.bisect_right(at, hi)]]
            if hits:
                key = re.sub(r"\.(nodes\[\d+\]|node_range\(.*\))$", "", field)  # a rack's nodes: one finding
                shown = net if net.prefixlen < 32 else net.network_address
                seen.setdefault(key, []).append(f"{field + ' ' if key != field else ''}{shown} overlaps "
                                                f"{other.name}'s {hits[0]}")
        for key, clashes in seen.items():
            more = f" and {len(clashes) - 3} more" if len(clashes) > 3 else ""
            yield key, (f"{'; '.join(clashes[:3])}{more} ({path.name}: the same site, so both would be routed "
                        f"there)")
        if env.onprem.vpn and other.onprem.vpn and env.onprem.vpn.peer_ip == other.onprem.vpn.peer_ip:
            yield ("onprem.vpn.peer_ip", f"{env.onprem.vpn.peer_ip} is also {other.name}'s VPN peer ({path.name}): "
                                         f"one on-prem device would serve two Azure gateways with one BGP session")
