"""The Ansible inventory, written from the plan (never by hand).

Groups: ``workers`` holds one ``rack_<rack>`` group per rack; ``team_<team>`` and
``gpu_<model>`` are made of rack groups (dashes become underscores: Ansible group names
must be identifiers). What a rack's nodes share (team, GPU, labels, taints) are the
rack group's variables; host variables are only what differs per node (address, pod
range); environment-wide values (and the control plane's outputs, as
``skyrack_cp_<key>``) are variables of ``all``. Every variable is prefixed ``skyrack_``.

Every value is data, never a template: the environment's values are validated as what they
are (URLs, DNS names, labels), and any string that could still start a Jinja2 construct
(holds a ``{``) is written as Ansible's ``!unsafe`` (YAML) or ``__ansible_unsafe`` (dynamic
JSON), so Ansible never evaluates it. Only public control-plane outputs enter an inventory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from . import files
from .errors import InputError, Problem, printable
from .plan import NodeVars, Plan


class Unsafe(str):
    """A string Ansible must never template."""


def mark_unsafe(value: Any) -> Any:
    """`value` with every string that holds a '{' (the start of any Jinja2 construct) made Unsafe."""
    if isinstance(value, str):
        return Unsafe(value) if "{" in value and not isinstance(value, Unsafe) else value
    if isinstance(value, dict):
        return {k: mark_unsafe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mark_unsafe(v) for v in value]
    return value


def _json_unsafe(value: Any) -> Any:
    if isinstance(value, Unsafe):
        return {"__ansible_unsafe": str(value)}
    if isinstance(value, dict):
        return {k: _json_unsafe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_unsafe(v) for v in value]
    return value


class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's safe dumper, writing Unsafe strings with Ansible's `!unsafe` tag."""


Dumper.add_representer(Unsafe, lambda d, v: d.represent_scalar("!unsafe", str(v)))


def check_path(path: Path, what: str) -> None:
    """A path handed to Ansible must not read as a template (a '{') nor hold control characters."""
    text = str(path)
    if "{" in text or printable(text) != text:
        raise InputError([Problem(printable(text), "", f"{what}: a path Ansible is given may not contain '{{' "
                                                       "or control characters")])


def dump_yaml(inv: dict[str, Any]) -> str:
    """An inventory as YAML for Ansible (no anchors, long lines kept)."""
    return yaml.dump(inv, Dumper=Dumper, sort_keys=False, width=200)


def write_secret_vars(path: Path, secrets: dict[str, Any]) -> None:
    """Secrets as a 0600 `-e @file` for ansible-playbook: YAML, a value that could read as a template `!unsafe`."""
    files.write_private(path, dump_yaml(mark_unsafe(secrets)))


def group_name(kind: str, name: str) -> str:
    return f"{kind}_" + re.sub(r"[^A-Za-z0-9_]", "_", name).lower()


def host_vars(node: NodeVars) -> dict[str, Any]:
    """Variables that differ from node to node."""
    return mark_unsafe({"ansible_host": node.ip, "skyrack_pod_cidr": node.pod_cidr})


def rack_vars(node: NodeVars, plan: Plan) -> dict[str, Any]:
    """Variables every node of a rack shares (a rack is one team, one GPU model, one L2 segment)."""
    return mark_unsafe({
        "skyrack_segment_peers": plan.segment_peers(node.rack),
        "skyrack_rack": node.rack,
        "skyrack_team": node.team,
        "skyrack_gpu_model": node.gpu_model,
        "skyrack_gpu_count": node.gpu_count,
        "skyrack_max_pods": node.max_pods,
        "skyrack_node_labels": node.labels,
        "skyrack_node_taints": node.taints,
        # the rack's `hardware` gives its kubelets' reservations and eviction thresholds (skyrack.tuning)
        "skyrack_kubelet_reserved": node.reservation.kubelet_fields() if node.reservation else {},
    })


def global_vars(plan: Plan, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    env = plan.env
    out = {
        "skyrack_env": env.name,
        "skyrack_kubernetes_version": env.kubernetes.version,
        "skyrack_containerd_version": env.kubernetes.containerd,
        "skyrack_allow_cgroup_v1": env.kubernetes.allow_cgroup_v1,
        "skyrack_service_cidr": str(env.kubernetes.service_cidr),
        "skyrack_cluster_domain": env.kubernetes.cluster_domain,
        "skyrack_cluster_dns": plan.node_dns_ip,
        "skyrack_apiserver_endpoint": plan.apiserver_endpoint,
        "skyrack_site_ca": env.mirrors.ca,
        "skyrack_apt_proxy": env.mirrors.apt_proxy,
        "skyrack_kubernetes_mirror": env.mirrors.kubernetes,
        "skyrack_registry_mirror": env.mirrors.registry,
        "skyrack_image_registries": plan.image_registries,
        "skyrack_sandbox_image": env.cluster.versions.pause,
        "skyrack_cluster_pod_cidr": str(env.kubernetes.pod_cidr),
    }
    for key, value in (outputs or {}).items():
        out[f"skyrack_cp_{key}"] = value
    return mark_unsafe(out)


def _racks(plan: Plan) -> dict[str, list[NodeVars]]:
    racks: dict[str, list[NodeVars]] = {}
    for node in plan.nodes:
        racks.setdefault(group_name("rack", node.rack), []).append(node)
    return racks


def _rack_groups(plan: Plan, racks: dict[str, list[NodeVars]]) -> dict[str, list[str]]:
    """Team and GPU groups, each made of rack groups."""
    out: dict[str, list[str]] = {}
    for rack, nodes in racks.items():
        first = nodes[0]
        if first.team:
            out.setdefault(group_name("team", first.team), []).append(rack)
        if first.gpu_model and first.gpu_count:
            out.setdefault(group_name("gpu", first.gpu_model), []).append(rack)
    return out


def dynamic(plan: Plan, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ansible's dynamic-inventory JSON (`--list`), with `_meta.hostvars`."""
    racks = _racks(plan)
    by_rack = _rack_groups(plan, racks)
    inv: dict[str, Any] = {
        "_meta": {"hostvars": {n.name: host_vars(n) for n in plan.nodes}},
        "all": {"children": ["ungrouped", "workers", *by_rack], "vars": global_vars(plan, outputs)},
        "workers": {"children": list(racks)},
    }
    for name, nodes in racks.items():
        inv[name] = {"hosts": [n.name for n in nodes], "vars": rack_vars(nodes[0], plan)}
    for name, members in by_rack.items():
        inv[name] = {"children": members}
    return _json_unsafe(inv)


def static(plan: Plan, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The YAML inventory: racks (with their shared vars) under `workers`; team/GPU groups of racks."""
    racks = _racks(plan)
    rack_groups = {name: {"vars": rack_vars(nodes[0], plan), "hosts": {n.name: host_vars(n) for n in nodes}}
                   for name, nodes in racks.items()}
    children: dict[str, Any] = {"workers": {"children": rack_groups}}
    for name, members in _rack_groups(plan, racks).items():
        children[name] = {"children": {m: {} for m in members}}
    return {"all": {"vars": global_vars(plan, outputs), "children": children}}


def leaving(plan: Plan, hosts: dict[str, str], outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The inventory of nodes that leave the cluster (skyrack.join.departures): host name -> address,
    in the group `leaving` the reset playbook runs on."""
    return {"all": {"vars": global_vars(plan, outputs),
                    "children": {"leaving": {"hosts": {h: mark_unsafe({"ansible_host": ip})
                                                       for h, ip in hosts.items()}}}}}
