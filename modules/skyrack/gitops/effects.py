"""Two revisions' derived facts of one environment (`derive`): the changes they show.

`compare` (the environment files, read by the code running `skyrack diff`) says what a
change to an environment file means; this module says what each revision's *own code*
derives differently, so a change to the IPAM code, a template, a role or a stack program
is reported by its consequence. Plan facts that the environment files' change alone
explains (the same difference between the two files' plans by one code) are left to
`compare`, so a consequence is reported once; the other families (user-data, stack
settings, cluster objects, rack runs, programs) are never seen by `compare` and are
reported whenever they differ.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .compare import endpoint_moved, nodes_readdressed, pod_ranges_moved, subnet_changed
from .model import Change, Risk

Path_ = tuple[str, ...]
Diff = dict[Path_, tuple[Any, Any]]
MISSING = None
SHOWN = 8  # names listed in a message


def leaf_diff(a: Any, b: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any, Any]]:
    """(path, before, after) for every leaf that differs; dicts are walked only where they differ."""
    if a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in dict.fromkeys([*a, *b]):
            if key not in b:
                yield (*path, key), a[key], MISSING
            elif key not in a:
                yield (*path, key), MISSING, b[key]
            else:
                yield from leaf_diff(a[key], b[key], (*path, key))
    else:
        yield path, a, b


def _names(items: list[str]) -> str:
    return ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _field(*parts: str) -> str:
    return "derived: " + ".".join(parts)


def changes(base: dict[str, Any], head: dict[str, Any], explained: Diff) -> list[Change]:
    """The changes between the facts of base and head, less the plan differences in `explained`.

    Either side may lack the plan family (both derived by one code: `compare` says it all)."""
    out: list[Change] = []
    for side, facts in (("base", base), ("head", head)):
        for key in ("error", "failed"):  # invalid by its own code (reported once when both are) / crashed
            if key in facts and (key == "failed" or base.get(key) != head.get(key)):
                out.append(Change("caution", "derived", _field(key), f"could not derive at {side}: "
                                  + "; ".join(facts[key] if isinstance(facts[key], list) else [facts[key]])))
    if out:
        return out
    for family in sorted(base.keys() | head.keys()):
        a, b = base.get(family) or {}, head.get(family) or {}
        for side, facts in (("base", a), ("head", b)):
            if "unavailable" in facts and a.get("unavailable") != b.get("unavailable"):
                out.append(Change("caution", "derived", _field(family),
                                  f"could not derive {family.replace('_', '-')} at {side}: {facts['unavailable']}"))
    ok = {f for f in base.keys() & head.keys() if "unavailable" not in base[f] and "unavailable" not in head[f]}
    if "plan" in ok:
        diff = {p: (x, y) for p, x, y in leaf_diff(base["plan"], head["plan"]) if explained.get(p) != (x, y)}
        out += _plan(diff, base["plan"], head["plan"])
    for family, fn in FAMILIES.items():
        if family in ok:
            out += fn(base[family], head[family])
    return out


# ----------------------------------------------------------------------------- plan


def _plan(diff: Diff, a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    out: list[Change] = []
    members: dict[tuple[str, str], list[str]] = {}
    nodes: dict[tuple[str, str], list[str]] = {}
    for path, (x, y) in diff.items():
        head = path[0]
        if head == "members" and len(path) >= 2:
            name = path[1]
            role = (b["members"].get(name) or a["members"].get(name))["role"]
            what = path[2] if len(path) > 2 else ("added" if x is MISSING else "removed")
            if what not in ("subnet", "index"):  # follow from the address
                members.setdefault((role, what), []).append(name if len(path) == 2 else f"{name} {x} → {y}")
        elif head == "nodes" and len(path) >= 2:
            node = b["nodes"].get(path[1]) or a["nodes"].get(path[1])
            what = path[2] if len(path) > 2 else ("added" if x is MISSING else "removed")
            nodes.setdefault((node["rack"], what), []).append(path[1])
        elif head == "node_meta":
            continue  # reported through the nodes that refer to it
        elif path[:2] == ("azure", "subnets") and len(path) == 3:
            out.append(subnet_changed(path[2], x, y, _field("subnets", path[2])))
        elif path == ("apiserver_endpoint",):
            out.append(endpoint_moved(x, y, _field("apiserver_endpoint")))
        elif path == ("azure", "apiserver_lb_ip"):
            out.append(Change("caution", "control-plane", _field("apiserver_lb_ip"),
                              f"the API servers' internal load balancer {x} → {y}"))
        elif head == "pools" and len(path) >= 3 and path[2] == "pod_cidr":
            out.append(Change("danger", "cloud-pools", _field("pools", path[1]),
                              f"cloud pool {path[1]}: pod range {x} → {y}: every node of the pool is re-created "
                              "(destructive)"))
        elif head == "onprem_pod_ranges":
            out.append(Change("caution", "vpn", _field(head), f"the pod ranges routed to on-prem change "
                              f"({len(x or [])} → {len(y or [])} prefixes): the VPN's routes are updated"))
        elif head == "sizing":
            out.append(Change("info", "control-plane", _field(*path), f"sizing {'.'.join(path[1:])}: {x} → {y}"))
        else:
            out.append(Change("caution", head, _field(*path), f"derived {'.'.join(path)}: {x} → {y}"))
    out += _members(members)
    out += _nodes(nodes, a, b)
    return out


def _members(groups: dict[tuple[str, str], list[str]]) -> Iterator[Change]:
    for (role, what), items in groups.items():
        etcd = role.startswith("etcd")
        quorum = "; a membership change each: quorum risk" if etcd else ", one at a time"
        risk: Risk = "danger" if etcd else "caution"
        field = _field("members", role, what)
        if what == "ip":
            yield Change(risk, "control-plane", field, f"{role} members re-addressed ({_names(items)}): each is "
                         f"replaced{quorum}")
        elif what == "zone":
            yield Change(risk, "control-plane", field, f"{role} members change zone ({_names(items)}): each is "
                         f"replaced, an Azure VM cannot move between zones{quorum}")
        elif what == "vm_size":
            yield Change(risk, "control-plane", field, f"{role} VMs resized ({_names(items)}): rolling "
                         f"replacement{quorum}")
        elif what in ("added", "removed"):
            yield Change("caution" if what == "removed" or etcd else "info", "control-plane", field,
                         f"{role} members {what}: {_names(items)}")
        else:
            yield Change("caution", "control-plane", field, f"{role} members: {what} changes ({_names(items)})")


def _nodes(groups: dict[tuple[str, str], list[str]], a: dict[str, Any], b: dict[str, Any]) -> Iterator[Change]:
    for (rack, what), names in groups.items():
        nodes = tuple(names)
        field = _field("nodes", rack, what)
        if what == "ip":
            yield nodes_readdressed(rack, nodes, field)
        elif what == "pod_cidr":
            yield pod_ranges_moved(rack, nodes, field)
        elif what == "meta":
            old, new = a["node_meta"][a["nodes"][names[0]]["meta"]], b["node_meta"][b["nodes"][names[0]]["meta"]]
            changed = [k for k in ("labels", "taints") if old[k] != new[k]]
            yield Change("caution", "nodes", field, f"rack {rack}: {' and '.join(changed)} of {len(nodes)} node(s) "
                         "change (Kubernetes node objects and the jobs they admit)", nodes)
        else:
            yield Change("caution", "nodes", field, f"rack {rack}: {what} changes on {len(nodes)} node(s)", nodes)


# ----------------------------------------------------------------------------- other families


def _user_data(a: dict[str, Any], b: dict[str, Any]) -> Iterator[Change]:
    if b["problem"] and not a["problem"]:
        yield Change("caution", "user-data", _field("user_data"), f"the stack cannot run: {b['problem']}")
    elif a["problem"] and not b["problem"]:
        yield Change("info", "user-data", _field("user_data"), f"every VM's user-data renders now (at base: "
                     f"{a['problem']})")
    by_role: dict[str, list[str]] = {}
    for vm, x in a["vms"].items():
        y = b["vms"].get(vm)
        if y is not None and x["text"] != y["text"]:
            by_role.setdefault(y["role"], []).append(vm)
    for role, vms in by_role.items():
        lines = sum(_changed_lines(a["vms"][v]["text"], b["vms"][v]["text"]) for v in vms)
        what = f"{'cloud-pool' if role == 'pool' else role} user-data changes ({_names(vms)}; {lines} line(s))"
        field = _field("user_data", role)
        if role == "pool":
            yield Change("caution", "user-data", field, f"{what}: the scale set's model changes; new instances "
                         "boot with it")
        elif b["lab"]:
            yield Change("caution", "user-data", field, f"{what}: the lab's nodes boot with it at their next "
                         "`skyrack lab up`")
        else:
            yield Change("caution", "user-data", field, f"{what}: running VMs keep what they booted with "
                         "(ignore_changes); each boots with it when replaced (`pulumi up --replace`, one member "
                         "at a time; docs/azure.md)")


def _changed_lines(x: str, y: str) -> int:
    import difflib

    return sum(1 for line in difflib.unified_diff(x.splitlines(), y.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---")))


def _stack(a: dict[str, Any], b: dict[str, Any]) -> Iterator[Change]:
    for path, x, y in leaf_diff(a, b):
        project, key = path[0], ".".join(path[1:])
        secret = "secret" in path or isinstance(x, dict) or isinstance(y, dict)
        what = "changed (a secret)" if secret else f"{'unset' if x is None else x} → {'unset' if y is None else y}"
        yield Change("caution", "stack", _field("stack", project), f"{project} stack setting {key}: {what}")


def _cluster(a: dict[str, Any], b: dict[str, Any]) -> Iterator[Change]:
    added, removed = sorted(b.keys() - a.keys()), sorted(a.keys() - b.keys())
    changed = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    field = _field("cluster")
    if changed:
        yield Change("caution", "cluster-layer", field, f"{len(changed)} cluster-layer object(s) change "
                     f"({_names(changed)}): `pulumi up` in stacks/cluster updates them")
    if added:
        yield Change("info", "cluster-layer", field, f"{len(added)} cluster-layer object(s) added ({_names(added)})")
    if removed:
        yield Change("caution", "cluster-layer", field, f"{len(removed)} cluster-layer object(s) removed "
                     f"({_names(removed)}): deleted by `pulumi up` in stacks/cluster")


def _racks(a: dict[str, Any], b: dict[str, Any]) -> Iterator[Change]:
    if not a or not b:
        return
    racks = sorted(b["files"])
    scope = f"{len(racks)} rack(s), {b['nodes']:,} node(s)"
    run = "on their next rack run (`skyrack join`, the rack workflow)"
    changed_roles = sorted(r for r in a["roles"].keys() | b["roles"].keys() if a["roles"].get(r) != b["roles"].get(r))
    if changed_roles:
        files = sorted({f for r in changed_roles
                        for f, _, _ in _file_changes(a["roles"].get(r) or {}, b["roles"].get(r) or {})})
        yield Change("caution", "racks", _field("racks", "roles"), f"role(s) {', '.join(changed_roles)} change "
                     f"({_names(files)}): every node of {scope} gets them {run}")
    playbooks = [f for f, _, _ in _file_changes(a["playbooks"], b["playbooks"])]
    if playbooks:
        yield Change("caution", "racks", _field("racks", "playbooks"), f"the join playbook changes "
                     f"({_names(playbooks)}): {scope} {run}")
    rendered = {t.rsplit("/", 1)[-1].removesuffix(".j2") for t in b["files"].get(racks[0], {})} if racks else set()
    templates = [f for f, _, _ in _file_changes(a["templates"], b["templates"])
                 if f.rsplit("/", 1)[-1].removesuffix(".j2") not in rendered]
    if templates:
        yield Change("caution", "racks", _field("racks", "templates"), f"join template(s) {_names(templates)} "
                     f"change: {scope} get them {run}")
    by_file: dict[str, list[str]] = {}
    for rack in racks:
        for name in (a["files"].get(rack) or {}).keys() & b["files"][rack].keys():
            if a["files"][rack][name] != b["files"][rack][name]:
                by_file.setdefault(name, []).append(rack)
    for name, which in by_file.items():
        yield Change("caution", "racks", _field("racks", name), f"{name} changes on the nodes of {len(which)} "
                     f"rack(s) ({_names(which)}): kubelets restart {run}")


def _file_changes(a: dict[str, str], b: dict[str, str]) -> Iterator[tuple[str, str | None, str | None]]:
    for f in sorted(a.keys() | b.keys()):
        if a.get(f) != b.get(f):
            yield f, a.get(f), b.get(f)


PROGRAMS = {"azure": "the Azure program (stacks/, skyrack.azure)", "cluster": "the cluster program (stacks/cluster, "
            "skyrack.kube)"}


def _programs(a: dict[str, Any], b: dict[str, Any]) -> Iterator[Change]:
    for name in sorted(a.keys() & b.keys()):
        files = [f for f, _, _ in _file_changes(a[name], b[name])]
        if files:
            yield Change("caution", "stack", _field("programs", name), f"{PROGRAMS[name]} changes "
                         f"({_names(files)}): what it does to the resources shows in `pulumi preview` (posted on "
                         "the pull request)")


FAMILIES = {"user_data": _user_data, "stack": _stack, "cluster": _cluster, "racks": _racks, "programs": _programs}
