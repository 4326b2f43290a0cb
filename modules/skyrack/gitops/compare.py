"""Two plans of one environment: the changes a reviewer must see, and their risk.

Works on the validated model and the plan (sizes, subnets, member zones, pod ranges
from the lock file), so a change is reported by its consequence: adding racks that
pushes the API servers to a bigger VM size shows up as a rolling replacement, not as
"nothing changed in control_plane". Nodes are matched by name in dictionaries (linear
in the number of nodes). Any field no rule here knows about is still reported, as a
caution, so nothing changes unseen.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from typing import Any

from .. import ipam, pki
from ..config import Environment
from ..plan import NodeVars, Plan
from ..policies.rules import public_exposure
from .model import Change, Risk

Section = Callable[[Plan, Plan], Iterator[Change]]
SECTIONS: list[Section] = []
# Leaf fields (dotted, lists are leaves) that a section below reports in its own words.
CLAIMED = {
    "name", "tier", "azure.location", "azure.resource_group", "azure.zones", "azure.vnet_cidr", "azure.admin_cidrs",
    "control_plane.apiservers.count", "control_plane.apiservers.vm_size", "control_plane.etcd.count",
    "control_plane.etcd.vm_size", "control_plane.etcd.events_cluster", "control_plane.etcd.quota_backend_gib",
    "kubernetes.version", "kubernetes.service_cidr", "kubernetes.pod_cidr", "kubernetes.pods_per_node",
    "kubernetes.cluster_domain", "kubernetes.node_dns_ip", "onprem.cidrs", "onprem.vpn",
    "mirrors.ca", "mirrors.apt_proxy", "mirrors.kubernetes", "teams", "cloud_pools", "racks",
}
QUIET_PREFIXES: dict[str, Risk] = {"backups.": "info", "lab.": "info"}  # other unclaimed fields: caution


def section(fn: Section) -> Section:
    SECTIONS.append(fn)
    return fn


def compare(old: Plan, new: Plan) -> list[Change]:
    out = [c for s in SECTIONS for c in s(old, new)]
    out += _unclaimed(old.env, new.env)
    if new.allocation.changed:
        # the file in the checkout: a revision's plan is sourced as `REV:path` (gitops.review), not a path to run on
        path = str(new.source).split(":", 1)[1] if ":" in str(new.source) else str(new.source)
        out.append(Change("caution", "nodes", new.lock_path.name,
                          f"the lock file is out of date: run `skyrack plan {path}` and commit it "
                          f"(pod ranges below are what it would allocate)"))
    return out


def summary(plan: Plan) -> str:
    """One line describing an environment (for one that is added or deleted)."""
    env = plan.env
    gpus = sum(n.gpu_count for n in plan.nodes)
    return (f"{len(plan.nodes):,} on-prem nodes in {len(env.racks)} racks ({gpus:,} GPUs), "
            f"{env.control_plane.apiservers.count} API servers, {env.control_plane.etcd.count} etcd members, "
            f"Kubernetes {env.kubernetes.version}, tier {env.tier}")


# ----------------------------------------------------------------------------- shared with `effects`
# The same consequence gets the same words whether an environment file or the code causes it.


def endpoint_moved(x: str, y: str, field: str) -> Change:
    return Change("danger", "control-plane", field,
                  f"API endpoint {x} → {y}: every kubeconfig and kubelet must be re-pointed")


def subnet_changed(name: str, x: str | None, y: str | None, field: str) -> Change:
    if x and y:
        return Change("danger", "network", field,
                      f"subnet {name} {x} → {y}: its VMs are re-created with new addresses (destructive)")
    return Change("info" if y else "caution", "network", field,
                  f"subnet {name} {'added: ' + str(y) if y else 'removed: ' + str(x)}")


def _count(names: tuple[str, ...]) -> str:
    return f"{len(names)} node{'s' if len(names) != 1 else ''}"


def nodes_readdressed(rack: str, nodes: tuple[str, ...], field: str) -> Change:
    return Change("caution", "nodes", field, f"rack {rack}: {_count(nodes)} re-addressed: each is drained and "
                  "re-joined (certificates, routes)", nodes)


def pod_ranges_moved(rack: str, nodes: tuple[str, ...], field: str) -> Change:
    return Change("danger", "nodes", field, f"rack {rack}: {_count(nodes)} of existing nodes get a different pod "
                  "range: running pods lose their addresses (a node keeps its range for life; check the lock file)",
                  nodes)


# ----------------------------------------------------------------------------- environment


@section
def _environment(old: Plan, new: Plan) -> Iterator[Change]:
    a, b = old.env, new.env
    if a.azure.location != b.azure.location:
        yield Change("danger", "environment", "azure.location",
                     f"Azure region {a.azure.location} → {b.azure.location}: every Azure resource is re-created "
                     "(destructive)")
    if a.resource_group != b.resource_group:
        yield Change("danger", "environment", "azure.resource_group",
                     f"resource group {a.resource_group} → {b.resource_group}: every Azure resource is re-created "
                     "(destructive)")
    if a.tier != b.tier:
        what = "production rules of `skyrack check` stop applying" if a.tier == "production" else (
            "production rules of `skyrack check` now apply" if b.tier == "production" else "policies unchanged")
        yield Change("caution", "environment", "tier", f"tier {a.tier} → {b.tier}: {what}")


# ----------------------------------------------------------------------------- control plane


def _role(plan: Plan, role: str) -> tuple[int, str | None]:
    """How many members a role has and their VM size."""
    members = plan.members_of(role)
    return len(members), (members[0].vm_size if members else None)


@section
def _control_plane(old: Plan, new: Plan) -> Iterator[Change]:
    auto = f" (vm_size auto: sized for {old.sizing.nodes:,} → {new.sizing.nodes:,} nodes)"
    n0, s0 = _role(old, "apiserver")
    n1, s1 = _role(new, "apiserver")
    if n0 != n1:
        how = "added behind the load balancer" if n1 > n0 else "removed; the others must carry their load"
        yield Change("caution", "control-plane", "control_plane.apiservers.count", f"API servers {n0} → {n1}: {how}")
    if s0 != s1:
        why = auto if new.env.control_plane.apiservers.vm_size == "auto" else ""
        yield Change("caution", "control-plane", "control_plane.apiservers.vm_size",
                     f"API-server VMs {s0} → {s1}: `pulumi up` leaves running members as they are; rolling "
                     f"replacement, one API server at a time (`pulumi up --replace`, docs/azure.md){why}")
    events0, events1 = old.env.control_plane.etcd.events_cluster, new.env.control_plane.etcd.events_cluster
    if events0 != events1:
        yield Change("caution", "control-plane", "control_plane.etcd.events_cluster",
                     "a separate etcd cluster for events is created; API servers restart with "
                     "--etcd-servers-overrides (event history is lost)" if events1 else
                     "the events etcd cluster is removed; events go back into the main etcd (event history is lost)")
    for role in ("etcd", "etcd-events"):
        n0, s0 = _role(old, role)
        n1, s1 = _role(new, role)
        if not (n0 and n1):
            continue  # created or removed: reported above
        if n0 != n1:
            yield Change("danger", "control-plane", "control_plane.etcd.count",
                         f"{role} {n0} → {n1} members: a membership change, one member at a time; "
                         "a mistake loses quorum")
        if s0 != s1:
            why = auto if new.env.control_plane.etcd.vm_size == "auto" else ""
            yield Change("danger", "control-plane", "control_plane.etcd.vm_size",
                         f"{role} VMs {s0} → {s1}: `pulumi up` leaves running members as they are (resizing them "
                         f"together would wipe every local NVMe at once); replace them one at a time "
                         f"(`pulumi up --replace`, each healthy in `skyrack etcd status` before the next, "
                         f"docs/azure.md), a membership change each: quorum risk{why}")
    q0, q1 = old.env.control_plane.etcd.quota_backend_gib, new.env.control_plane.etcd.quota_backend_gib
    if q0 != q1:
        risk: Risk = "caution" if q1 > q0 else "danger"
        yield Change(risk, "control-plane", "control_plane.etcd.quota_backend_gib",
                     f"etcd backend quota {q0} → {q1} GiB: members restart one at a time"
                     + ("" if q1 > q0 else "; an etcd over its quota stops accepting writes"))
    yield from _zones(old, new)
    if old.apiserver_endpoint != new.apiserver_endpoint:
        yield endpoint_moved(old.apiserver_endpoint, new.apiserver_endpoint, "azure.vnet_cidr")


def _zones(old: Plan, new: Plan) -> Iterator[Change]:
    before = {m.name: m for m in old.members}
    moved: dict[str, list[str]] = {}
    for m in new.members:
        o = before.get(m.name)
        if o is not None and o.zone != m.zone:
            moved.setdefault(m.role, []).append(f"{m.name} {o.zone} → {m.zone}")
    for role, items in moved.items():
        etcd = role.startswith("etcd")
        yield Change("danger" if etcd else "caution", "control-plane", "azure.zones",
                     f"{role} members change zone ({', '.join(items)}): each is replaced, an Azure VM cannot move "
                     "between zones" + ("; a membership change each: quorum risk" if etcd else ""))
    z0, z1 = old.env.azure.zones, new.env.azure.zones
    if z0 != z1 and not moved:
        yield Change("info", "control-plane", "azure.zones", f"zones {z0} → {z1}: no member changes zone")


# ----------------------------------------------------------------------------- network


def _net_changes(old: list[Any], new: list[Any]) -> tuple[list[Any], list[Any]]:
    return [n for n in new if n not in old], [n for n in old if n not in new]


@section
def _network(old: Plan, new: Plan) -> Iterator[Change]:
    a, b = old.env, new.env
    destructive = {
        "azure.vnet_cidr": (a.azure.vnet_cidr, b.azure.vnet_cidr,
                            "the VNet and every control-plane VM are re-created with new addresses"),
        "kubernetes.service_cidr": (a.kubernetes.service_cidr, b.kubernetes.service_cidr,
                                    "every Service's cluster IP changes, kube-dns included: in effect a new cluster"),
        "kubernetes.pod_cidr": (a.kubernetes.pod_cidr, b.kubernetes.pod_cidr,
                                "every node's pod range moves: every node is drained and re-joined"),
    }
    for field, (x, y, what) in destructive.items():
        if x != y:
            yield Change("danger", "network", field, f"{field.split('.')[-1]} {x} → {y}: {what} (destructive)")
    p0, p1 = a.kubernetes.pods_per_node, b.kubernetes.pods_per_node
    blocks = ipam.block_prefix(p0), ipam.block_prefix(p1)
    if p0 != p1:
        if blocks[0] != blocks[1]:
            yield Change("danger", "network", "kubernetes.pods_per_node",
                         f"pods per node {p0} → {p1} changes every node's pod range from /{blocks[0]} to /{blocks[1]}: "
                         "every pod range moves (destructive)")
        else:
            yield Change("caution", "network", "kubernetes.pods_per_node",
                         f"pods per node {p0} → {p1}: every kubelet restarts with the new --max-pods")
    if a.kubernetes.cluster_domain != b.kubernetes.cluster_domain:
        yield Change("danger", "network", "kubernetes.cluster_domain",
                     f"cluster domain {a.kubernetes.cluster_domain} → {b.kubernetes.cluster_domain}: every in-cluster "
                     "DNS name changes")
    if a.kubernetes.node_dns_ip != b.kubernetes.node_dns_ip:
        yield Change("danger", "network", "kubernetes.node_dns_ip",
                     f"node DNS address {a.kubernetes.node_dns_ip} → {b.kubernetes.node_dns_ip}: every node's cache "
                     "moves to the new address and every kubelet restarts with it as clusterDNS, which applies to new "
                     "pods only: running pods keep the old address in their resolv.conf and lose DNS until they are "
                     "re-created")
    if a.azure.vnet_cidr == b.azure.vnet_cidr:
        for name in dict.fromkeys([*old.subnets, *new.subnets]):
            x, y = old.subnets.get(name), new.subnets.get(name)
            if x == y:
                continue
            yield subnet_changed(name, x, y, "azure.vnet_cidr")
    added, removed = _net_changes(a.azure.admin_cidrs, b.azure.admin_cidrs)
    for net in added:
        why = public_exposure(net)
        yield Change("danger" if why else "caution", "network", "azure.admin_cidrs",
                     f"admin range {net} added: widens access to the API server" + (f" ({why})" if why else ""))
    for net in removed:
        yield Change("info", "network", "azure.admin_cidrs", f"admin range {net} removed: narrows access")
    added, removed = _net_changes(a.onprem.cidrs, b.onprem.cidrs)
    for net in added:
        yield Change("caution", "network", "onprem.cidrs",
                     f"on-prem range {net} added: routed over the VPN (the local network gateway is updated)")
    for net in removed:
        yield Change("danger", "network", "onprem.cidrs",
                     f"on-prem range {net} removed: nodes in it can no longer reach the control plane")


@section
def _vpn(old: Plan, new: Plan) -> Iterator[Change]:
    x, y = old.env.onprem.vpn, new.env.onprem.vpn
    if x == y:
        return
    if x is None:
        yield Change("caution", "vpn", "onprem.vpn",
                     f"a VPN gateway to {y.peer_ip} is created (Azure takes ~30-45 min)")
    elif y is None:
        yield Change("danger", "vpn", "onprem.vpn",
                     "the VPN is removed: the on-prem racks lose their route to the control plane")
    else:
        if x.peer_ip != y.peer_ip:
            yield Change("danger", "vpn", "onprem.vpn.peer_ip",
                         f"VPN peer {x.peer_ip} → {y.peer_ip}: the tunnel is rebuilt; racks lose the control plane "
                         "until the new peer is up")
        if (x.asn, x.bgp_peer_ip) != (y.asn, y.bgp_peer_ip):
            yield Change("caution", "vpn", "onprem.vpn",
                         f"BGP (asn {x.asn}, peer {x.bgp_peer_ip}) → (asn {y.asn}, peer {y.bgp_peer_ip}): "
                         "sessions re-establish; routes to on-prem pod ranges flap")


# ----------------------------------------------------------------------------- kubernetes


def _version(text: str) -> tuple[int, int]:
    _, minor, patch = (int(x) for x in text.split("."))
    return minor, patch


@section
def _kubernetes(old: Plan, new: Plan) -> Iterator[Change]:
    v0, v1 = old.env.kubernetes.version, new.env.kubernetes.version
    if v0 == v1:
        return
    (m0, p0), (m1, p1) = _version(v0), _version(v1)
    if (m1, p1) < (m0, p0):
        yield Change("danger", "kubernetes", "kubernetes.version",
                     f"Kubernetes {v0} → {v1} is a downgrade: kubeadm does not support it")
    elif m1 - m0 > 1:
        yield Change("danger", "kubernetes", "kubernetes.version",
                     f"Kubernetes {v0} → {v1} skips {m1 - m0 - 1} minor version(s): upgrades go one minor at a time "
                     "(rejected)")
    elif m1 == m0 + 1:
        yield Change("caution", "kubernetes", "kubernetes.version",
                     f"Kubernetes upgrade {v0} → {v1}: control plane first, then the cluster layer, then the racks "
                     "(canary first), each rack's nodes drained and upgraded a batch at a time "
                     "(`skyrack upgrade --plan`)")
    else:
        yield Change("caution", "kubernetes", "kubernetes.version",
                     f"Kubernetes patch upgrade {v0} → {v1}: every component restarts, one at a time")


@section
def _mirrors(old: Plan, new: Plan) -> Iterator[Change]:
    x, y = old.env.mirrors.ca, new.env.mirrors.ca
    if x != y:
        shown = lambda pem: f"CA {pki.fingerprint(pem)[:23]}…" if pem else "no site CA"  # noqa: E731
        yield Change("caution", "mirrors", "mirrors.ca",
                     f"{shown(x)} → {shown(y)}: rack nodes trust it from their next rack run, VMs and pool nodes "
                     "created from now on; running VMs keep what they booted with (cloud-init runs once): list "
                     "both CAs while mirrors keep their old certificates, until every VM is replaced (docs/azure.md)")
    for field in ("apt_proxy", "kubernetes"):
        x, y = getattr(old.env.mirrors, field), getattr(new.env.mirrors, field)
        if x != y:
            yield Change("caution", "mirrors", f"mirrors.{field}",
                         f"{field} mirror {x or 'none'} → {y or 'none'}: nodes use it from their next rack run")


# ----------------------------------------------------------------------------- teams and pools


def _by_name(items: list[Any]) -> dict[str, dict[str, Any]]:
    return {i.name: i.model_dump(mode="json") for i in items}


def _field_changes(kind: str, field: str, x: dict[str, Any], y: dict[str, Any], handled: set[str]) -> Iterator[Change]:
    for key in x.keys() | y.keys():
        if key not in handled and x.get(key) != y.get(key):
            yield Change("caution", kind, field, f"{field} {x['name']}: {key} {x.get(key)} → {y.get(key)}")


@section
def _teams(old: Plan, new: Plan) -> Iterator[Change]:
    a, b = _by_name(old.env.teams), _by_name(new.env.teams)
    for name in b.keys() - a.keys():
        yield Change("info", "teams", "teams", f"team {name} added (GPU quota {b[name]['gpu_quota']})")
    for name in a.keys() - b.keys():
        yield Change("caution", "teams", "teams", f"team {name} removed: its quota and priority class go")
    index = {t.name: i for i, t in enumerate(new.env.teams)}
    for name in a.keys() & b.keys():
        q0, q1 = a[name]["gpu_quota"], b[name]["gpu_quota"]
        if q0 != q1:
            lower = q1 is not None and (q0 is None or q1 < q0)
            yield Change("caution" if lower else "info", "teams", f"teams[{index[name]}].gpu_quota",
                         f"team {name}: GPU quota {q0} → {q1}"
                         + (" (running jobs keep running; new ones wait)" if lower else ""))
        yield from _field_changes("teams", "team", a[name], b[name], {"name", "gpu_quota"})


@section
def _pools(old: Plan, new: Plan) -> Iterator[Change]:
    a, b = _by_name(old.env.cloud_pools), _by_name(new.env.cloud_pools)
    for name in b.keys() - a.keys():
        p = b[name]
        yield Change("info", "cloud-pools", "cloud_pools",
                     f"cloud pool {name} added: {p['vm_size']}, {p['min']} to {p['max']} nodes")
    for name in a.keys() - b.keys():
        yield Change("caution", "cloud-pools", "cloud_pools",
                     f"cloud pool {name} removed: its VMs are deleted and their pods evicted")
    for name in a.keys() & b.keys():
        x, y = a[name], b[name]
        if x["vm_size"] != y["vm_size"]:
            yield Change("caution", "cloud-pools", "cloud_pools",
                         f"cloud pool {name}: VM size {x['vm_size']} → {y['vm_size']}: every node of the pool is "
                         "replaced")
        if (x["min"], x["max"]) != (y["min"], y["max"]):
            yield Change("info", "cloud-pools", "cloud_pools",
                         f"cloud pool {name}: {x['min']} to {x['max']} → {y['min']} to {y['max']} nodes")
        yield from _field_changes("cloud-pools", "cloud pool", x, y, {"name", "vm_size", "min", "max"})
    if _pod_layout(old) != _pod_layout(new):
        return  # every range moved: reported once by _network
    r0 = {p.name: p.pod_cidr for p in old.pools}
    for p in new.pools:
        if p.name in r0 and r0[p.name] != p.pod_cidr:
            yield Change("danger", "cloud-pools", "cloud_pools",
                         f"cloud pool {p.name}: pod range {r0[p.name]} → {p.pod_cidr}: every node of the pool is "
                         "re-created (destructive)")


def _pod_layout(plan: Plan) -> tuple[ipaddress.IPv4Network, int]:
    return plan.env.kubernetes.pod_cidr, ipam.block_prefix(plan.env.kubernetes.pods_per_node)


# ----------------------------------------------------------------------------- racks and nodes


def _gpus(n: NodeVars) -> str:
    return f"{n.gpu_count} × {n.gpu_model}" if n.gpu_model and n.gpu_count else "no GPUs"


@section
def _nodes(old: Plan, new: Plan) -> Iterator[Change]:
    before = {n.name: n for n in old.nodes}
    after_names = {n.name for n in new.nodes}
    rack_at = {r.name: i for i, r in enumerate(new.env.racks)}
    rack_was = {r.name: i for i, r in enumerate(old.env.racks)}
    same_layout = _pod_layout(old) == _pod_layout(new)
    groups: dict[tuple[str, ...], list[str]] = {}  # (kind, rack, detail...) -> node names, in file order

    def add(key: tuple[str, ...], name: str) -> None:
        groups.setdefault(key, []).append(name)

    first: dict[str, NodeVars] = {}  # a node of each new rack, for its description
    for n in new.nodes:
        first.setdefault(n.rack, n)
        o = before.get(n.name)
        if o is None:
            add(("added", n.rack), n.name)
            continue
        if o.rack != n.rack:
            add(("moved", n.rack, o.rack, o.team or "-", n.team or "-"), n.name)
        elif o.team != n.team:
            add(("team", n.rack, o.team or "-", n.team or "-"), n.name)
        if o.ip != n.ip:
            add(("ip", n.rack), n.name)
        if same_layout and o.pod_cidr != n.pod_cidr:
            add(("pod", n.rack), n.name)
        if o.rack == n.rack and _gpus(o) != _gpus(n):
            add(("gpu", n.rack, _gpus(o), _gpus(n)), n.name)
    gone_racks = {r for r in rack_was if r not in rack_at}
    rack_gpus: dict[str, int] = {}
    for o in old.nodes:
        if o.name not in after_names:
            add(("removed", o.rack), o.name)
            rack_gpus[o.rack] = rack_gpus.get(o.rack, 0) + o.gpu_count

    for key, names in groups.items():
        kind, rack = key[0], key[1]
        count = _count(tuple(names))
        field = f"racks[{rack_at[rack]}]" if rack in rack_at else f"racks[{rack_was[rack]}] (at base)"
        nodes = tuple(names)
        if kind == "added":
            n = first[rack]
            if rack not in rack_was:
                gpus = f"{n.gpu_count * len(names):,} GPUs" if n.gpu_count else "no GPUs"
                msg = f"rack {rack} added: {count} ({_gpus(n)} each, {gpus}), team {n.team or 'none'}"
            else:
                msg = f"rack {rack}: {count} added"
            yield Change("info", "nodes", field, msg, nodes)
        elif kind == "removed":
            gpus = f", {rack_gpus[rack]:,} GPUs" if rack_gpus.get(rack) else ""
            what = f"rack {rack} removed: {count}" if rack in gone_racks else f"rack {rack}: {count}"
            yield Change("caution", "nodes", field, f"{what}{gpus} drained and removed from the cluster", nodes)
        elif kind == "moved":
            team = f" (team {key[3]} → {key[4]})" if key[3] != key[4] else ""
            yield Change("caution", "nodes", field,
                         f"{count} moved from rack {key[2]} to {rack}{team}: labels and taints change", nodes)
        elif kind == "team":
            yield Change("caution", "nodes", f"{field}.team",
                         f"rack {rack}: {count} move from team {key[2]} to {key[3]}: taints change; running jobs "
                         "finish, new ones are the new team's", nodes)
        elif kind == "ip":
            yield nodes_readdressed(rack, nodes, field)
        elif kind == "pod":
            yield pod_ranges_moved(rack, nodes, new.lock_path.name)
        elif kind == "gpu":
            yield Change("info", "nodes", f"{field}.gpu", f"rack {rack}: GPUs {key[2]} → {key[3]} on {count}", nodes)


# ----------------------------------------------------------------------------- everything else


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def _unclaimed(a: Environment, b: Environment) -> Iterator[Change]:
    """Fields no section reports (new schema fields, backups, lab): reported plainly."""
    x, y = (_flatten(e.model_dump(mode="json", exclude={"racks"})) for e in (a, b))
    for path in dict.fromkeys([*x, *y]):
        claimed = path in CLAIMED or any(path.startswith(c + ".") for c in CLAIMED)
        if claimed or x.get(path) == y.get(path):
            continue
        risk = next((r for p, r in QUIET_PREFIXES.items() if path.startswith(p)), "caution")
        yield Change(risk, path.split(".")[0], path, f"{path}: {x.get(path)} → {y.get(path)}")
