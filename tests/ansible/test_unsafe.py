"""Nothing in an inventory skyrack writes is a template: Ansible itself runs on one holding hostile values.

The values are put in behind validation's back (validation rejects them: tests/core/test_hostile.py),
so this proves the second line of defence, the `!unsafe` marking, on its own. The control run
writes the same inventory without the marking and shows the hostile value would have run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from skyrack import config, inventory
from skyrack import plan as planmod
from support import CONFIGS


def hostile(mark: Path) -> str:
    return "{{ lookup('pipe', 'touch " + str(mark) + "') }}"


def hostile_plan(value: str) -> planmod.Plan:
    p = planmod.make(CONFIGS / "dev.yaml")
    env = p.env
    env = env.model_copy(update={
        "mirrors": config.Mirrors.model_construct(apt_proxy=value, kubernetes=value, registry=None),
        "kubernetes": env.kubernetes.model_copy(update={"cluster_domain": value}),
    })
    node = dataclasses.replace(p.nodes[0], team=value, labels={**p.nodes[0].labels, "skyrack.io/team": value},
                               taints=[value])
    return dataclasses.replace(p, env=env, nodes=[node])


PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: write every variable that carries the hostile value
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: |
          {{ skyrack_apt_proxy }}
          {{ skyrack_kubernetes_mirror }}
          {{ skyrack_cluster_domain }}
          {{ skyrack_team }}
          {{ skyrack_node_labels['skyrack.io/team'] }}
          {{ skyrack_node_taints[0] }}
          {{ skyrack_cp_ca_cert_pem }}
        mode: "0600"
"""


def run_playbook(tmp_path: Path, inventory_path: Path, out: Path) -> subprocess.CompletedProcess[str]:
    playbook = tmp_path / "show.yml"
    playbook.write_text(PLAYBOOK)
    exe = Path(sys.executable).with_name("ansible-playbook")
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOST_KEY_CHECKING": "False",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_REMOTE_TEMP": str(tmp_path / "tmp")}
    return subprocess.run([str(exe), "-i", str(inventory_path), str(playbook), "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"out={out}"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)


def expected_lines(value: str) -> list[str]:
    return [value] * 7


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_hostile_values_stay_text(tmp_path: Path, form: str) -> None:
    mark = tmp_path / "pwned"
    value = hostile(mark)
    p = hostile_plan(value)
    outs = {"ca_cert_pem": value}
    if form == "yaml":
        inv_path = tmp_path / "hosts.yml"
        inv_path.write_text(inventory.dump_yaml(inventory.static(p, outs)))
    else:
        data = tmp_path / "inventory.json"
        data.write_text(json.dumps(inventory.dynamic(p, outs)))
        inv_path = tmp_path / "inventory.sh"
        inv_path.write_text(f"#!/bin/sh\ncat {data}\n")
        inv_path.chmod(0o755)
    out = tmp_path / "out.txt"
    proc = run_playbook(tmp_path, inv_path, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not mark.exists(), "a value in the inventory ran a command"
    assert out.read_text().splitlines() == expected_lines(value), "the value reached the host as the same text"


def test_the_same_inventory_without_the_marking_would_run_it(tmp_path: Path) -> None:
    """The control: proves the hostile value is live, so the test above can fail."""
    mark = tmp_path / "pwned"
    p = hostile_plan(hostile(mark))
    inv_path = tmp_path / "hosts.yml"
    plain = json.loads(json.dumps(inventory.static(p, {"ca_cert_pem": hostile(mark)})))  # Unsafe -> str
    inv_path.write_text(yaml.safe_dump(plain))
    run_playbook(tmp_path, inv_path, tmp_path / "out.txt")
    assert mark.exists()
