"""Render the files the join puts on a node, from Python, exactly as the Ansible roles do.

The roles and this module use the same templates (`skyrack/templates/join/`) with the
same variables: the inventory's host and group variables plus the roles' defaults. A
test compares a file rendered here with the one Ansible wrote on a lab node, and the
cluster layer checks the JoinConfiguration against what its control plane expects.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2
import yaml

from .. import inventory, resources
from ..errors import InputError, Problem
from ..plan import Plan

TEMPLATES = resources.TEMPLATES
ANSIBLE_DIR = resources.ANSIBLE


@cache
def _env() -> jinja2.Environment:
    # Ansible's template module: trim_blocks on, lstrip_blocks off, the trailing newline kept.
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), trim_blocks=True,
                              keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701


def role_defaults(role: str) -> dict[str, Any]:
    """A role's plain defaults (values that are themselves templates are left out)."""
    data = yaml.safe_load((ANSIBLE_DIR / "roles" / role / "defaults/main.yml").read_text()) or {}
    return {k: v for k, v in data.items() if not (isinstance(v, str) and "{{" in v)}


def node_vars(plan: Plan, name: str, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every variable a template sees for node `name`, as Ansible would give it."""
    node = next((n for n in plan.nodes if n.name == name), None)
    if node is None:
        raise InputError([Problem(str(plan.source), "racks", f"no node named {name!r}")])
    return {**role_defaults("kubelet"), **role_defaults("kubeadm_join"), **inventory.global_vars(plan, outputs),
            **inventory.rack_vars(node, plan), **inventory.host_vars(node), "inventory_hostname": name}


def render(template: str, variables: dict[str, Any]) -> str:
    return _env().get_template(template).render(**variables)


def kubelet_config(plan: Plan, name: str) -> str:
    return render("join/kubelet-config.yaml.j2", node_vars(plan, name))


def kubelet_flags(plan: Plan, name: str) -> str:
    return render("join/kubelet-flags.env.j2", node_vars(plan, name))


def join_configuration(plan: Plan, name: str, outputs: dict[str, Any]) -> str:
    """The kubeadm JoinConfiguration for node `name` (holds the bootstrap token: a secret)."""
    return render("join/kubeadm-join.yaml.j2", node_vars(plan, name, outputs))
