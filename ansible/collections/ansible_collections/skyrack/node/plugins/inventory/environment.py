# The on-prem racks of a skyrack environment as an Ansible inventory source (ansible-inventory, AWX).
from __future__ import annotations

DOCUMENTATION = r"""
name: environment
short_description: The on-prem racks of a skyrack environment file
description:
  - The inventory C(skyrack inventory) prints, read by Ansible itself from the environment file, so
    C(ansible-inventory), C(ansible-playbook -i) and AWX inventory sources use it with no generated file.
  - Groups C(workers) (one C(rack_<rack>) group per rack), C(team_<team>) and C(gpu_<model>); every
    variable prefixed C(skyrack_); the control plane's public outputs as C(skyrack_cp_<key>) when
    O(outputs) is given (secret outputs never enter an inventory).
  - Every value is data, never a template (each one is marked unsafe).
  - The file must end in C(.skyrack.yml) or C(.skyrack.yaml).
requirements:
  - the skyrack Python package importable by the Python that runs Ansible
options:
  plugin:
    description: The name of this plugin.
    required: true
    choices: [skyrack.node.environment]
  environment:
    description: The environment file (C(configs/<env>.yaml)), relative to this inventory file's directory.
    required: true
    type: path
  outputs:
    description: The control plane's outputs (C(pulumi stack output --json)), relative to this file's directory.
    required: false
    type: path
"""

EXAMPLES = r"""
# inventory/prod.skyrack.yml
plugin: skyrack.node.environment
environment: ../configs/prod.yaml
"""

import os
from pathlib import Path

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin
from ansible.utils.unsafe_proxy import wrap_var


class InventoryModule(BaseInventoryPlugin):
    NAME = "skyrack.node.environment"

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith((".skyrack.yml", ".skyrack.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        try:
            from skyrack import inventory as inv
            from skyrack import outputs as contract
            from skyrack import plan as planmod
            from skyrack.errors import InputError
        except ImportError as exc:
            raise AnsibleParserError(f"{path}: the skyrack Python package is not importable here ({exc})") from None
        here = Path(os.path.dirname(path))
        try:
            plan = planmod.make(here / self.get_option("environment"))
            public = None
            if self.get_option("outputs"):
                outputs_path = here / self.get_option("outputs")
                data = contract.validate(contract.read_file(outputs_path), outputs_path)
                public, _secret = contract.split_secrets(data)
        except InputError as exc:
            raise AnsibleParserError("; ".join(str(p) for p in exc.problems)) from None
        self._add_group("all", inv.static(plan, public)["all"])

    def _add_group(self, name, group):
        if name != "all":
            self.inventory.add_group(name)
        for key, value in (group.get("vars") or {}).items():
            self.inventory.set_variable(name, key, wrap_var(value))
        for host, host_vars in (group.get("hosts") or {}).items():
            self.inventory.add_host(host, group=name)
            for key, value in (host_vars or {}).items():
                self.inventory.set_variable(host, key, wrap_var(value))
        for child, sub in (group.get("children") or {}).items():
            self._add_group(child, sub or {})
            if name != "all":
                self.inventory.add_child(name, child)
