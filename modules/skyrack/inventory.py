"""The Ansible inventory, written from the plan (never by hand).

Groups: ``rack_<rack>`` and ``team_<team>`` (dashes become underscores: Ansible group
names must be identifiers), ``gpu_<model>``, and ``workers`` holding every node. Host
variables are the plan's per-node variables, prefixed ``skyrack_``; environment-wide
values are group variables of ``all``.
"""

from __future__ import annotations

import re
from typing import Any

from .plan import NodeVars, Plan


def group_name(kind: str, name: str) -> str:
    return f"{kind}_" + re.sub(r"[^A-Za-z0-9_]", "_", name).lower()


def host_vars(node: NodeVars) -> dict[str, Any]:
    return {
        "ansible_host": node.ip,
        "skyrack_rack": node.rack,
        "skyrack_team": node.team,
        "skyrack_gpu_model": node.gpu_model,
        "skyrack_gpu_count": node.gpu_count,
        "skyrack_pod_cidr": node.pod_cidr,
        "skyrack_max_pods": node.max_pods,
        "skyrack_node_labels": node.labels,
        "skyrack_node_taints": node.taints,
    }


def global_vars(plan: Plan, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    env = plan.env
    out = {
        "skyrack_env": env.name,
        "skyrack_kubernetes_version": env.kubernetes.version,
        "skyrack_service_cidr": str(env.kubernetes.service_cidr),
        "skyrack_cluster_domain": env.kubernetes.cluster_domain,
        "skyrack_cluster_dns": str(env.kubernetes.service_cidr.network_address + 10),
        "skyrack_apiserver_endpoint": plan.apiserver_endpoint,
        "skyrack_apt_proxy": env.mirrors.apt_proxy,
        "skyrack_kubernetes_mirror": env.mirrors.kubernetes,
    }
    for key, value in (outputs or {}).items():
        out[f"skyrack_cp_{key}"] = value
    return out


def groups(plan: Plan) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for node in plan.nodes:
        out.setdefault(group_name("rack", node.rack), []).append(node.name)
        if node.team:
            out.setdefault(group_name("team", node.team), []).append(node.name)
        if node.gpu_model and node.gpu_count:
            out.setdefault(group_name("gpu", node.gpu_model), []).append(node.name)
    return out


def dynamic(plan: Plan, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ansible's dynamic-inventory JSON (`--list`), with `_meta.hostvars`."""
    grp = groups(plan)
    inv: dict[str, Any] = {
        "_meta": {"hostvars": {n.name: host_vars(n) for n in plan.nodes}},
        "all": {"children": ["ungrouped", "workers", *grp], "vars": global_vars(plan, outputs)},
        "workers": {"hosts": [n.name for n in plan.nodes]},
    }
    for name, hosts in grp.items():
        inv[name] = {"hosts": hosts}
    return inv


def static(plan: Plan, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The YAML inventory format: host variables in `workers`, other groups list hosts."""
    children: dict[str, Any] = {"workers": {"hosts": {n.name: host_vars(n) for n in plan.nodes}}}
    for name, hosts in groups(plan).items():
        children[name] = {"hosts": dict.fromkeys(hosts)}
    return {"all": {"vars": global_vars(plan, outputs), "children": children}}
