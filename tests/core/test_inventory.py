"""`skyrack inventory`: what Ansible itself reads back from it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT, run_cli


def ansible_inventory(source: Path) -> dict:
    """Parse an inventory with the real `ansible-inventory --list`."""
    exe = Path(sys.executable).with_name("ansible-inventory")
    proc = subprocess.run([str(exe), "-i", str(source), "--list"], capture_output=True, text=True,
                          env={**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"}, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_yaml_inventory_as_ansible_reads_it(tmp_path: Path) -> None:
    proc = run_cli("inventory", "configs/dev.yaml")
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "hosts.yml"
    path.write_text(proc.stdout)
    inv = ansible_inventory(path)
    assert sorted(inv["rack_r01"]["hosts"]) == ["r01-n01", "r01-n02", "r01-n03", "r01-n04"]
    assert inv["team_robotics"]["children"] == ["rack_r01"]
    assert inv["workers"]["children"] == ["rack_r01"]
    assert "gpu_a100_sxm4_80gb" in inv
    hv = inv["_meta"]["hostvars"]["r01-n02"]
    assert hv["ansible_host"] == "10.67.0.12"
    assert hv["skyrack_pod_cidr"] == "10.192.0.64/26"
    assert hv["skyrack_node_labels"]["skyrack.io/team"] == "robotics"
    assert "skyrack.io/team=robotics:NoSchedule" in hv["skyrack_node_taints"]
    assert hv["skyrack_env"] == "dev", "group vars of all reach every host"


def test_json_inventory_is_a_dynamic_inventory(tmp_path: Path) -> None:
    script = tmp_path / "inventory.sh"
    script.write_text(f"#!/bin/sh\ncd {ROOT} && PYTHONPATH=modules exec {sys.executable} -m skyrack inventory --json configs/prod.yaml\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    inv = ansible_inventory(script)
    racks = [g for g in inv if g.startswith("rack_")]
    assert len(racks) == 120
    assert sum(len(inv[r]["hosts"]) for r in racks) == 7680
    assert len(inv["_meta"]["hostvars"]) == 7680
    assert inv["_meta"]["hostvars"]["r120-n64"]["skyrack_team"] == "language", "rack vars reach hosts"
    assert {g for g in inv if g.startswith("team_")} == {"team_robotics", "team_language", "team_vision", "team_rl"}
    assert len(inv["team_language"]["children"]) == 28 + 8


def test_yaml_has_no_anchors() -> None:
    """Anchors (&id001) make an inventory unreadable in review; every group is written out."""
    assert "&id" not in run_cli("inventory", "configs/prod.yaml").stdout


HASH = "sha256:" + "ab" * 32


def test_outputs_become_group_vars(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"apiserver_endpoint": "https://10.0.0.46:6443", "ca_cert_hash": HASH}))
    doc = json.loads(run_cli("inventory", "--json", "--outputs", str(outputs), "configs/dev.yaml").stdout)
    assert doc["all"]["vars"]["skyrack_cp_ca_cert_hash"] == HASH


SECRETS = {"bootstrap_token": "abcdef.0123456789abcdef", "admin_kubeconfig": "apiVersion: v1\nkind: Config\n",
           "vpn_shared_key": "pre-shared-key-42", "admin_ssh_private_key": "-----BEGIN PRIVATE KEY-----\nXYZ\n"}


@pytest.mark.parametrize("fmt", [[], ["--json"]], ids=["yaml", "json"])
def test_secret_outputs_never_reach_stdout(tmp_path: Path, fmt: list[str]) -> None:
    """Secrecy comes from the contract: `admin_kubeconfig` and `vpn_shared_key` hold no 'token' or 'secret'."""
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"apiserver_endpoint": "https://10.0.0.46:6443", "ca_cert_hash": HASH, **SECRETS}))
    proc = run_cli("inventory", *fmt, "--outputs", str(outputs), "configs/dev.yaml")
    assert proc.returncode == 0, proc.stderr
    for value in SECRETS.values():
        assert value not in proc.stdout and value not in proc.stderr
    assert "skyrack_cp_ca_cert_hash" in proc.stdout
    assert "left out of the inventory: bootstrap_token, admin_kubeconfig, vpn_shared_key, admin_ssh_private_key" in proc.stderr


def test_outputs_that_break_the_contract_are_refused(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"apiserver_endpoint": "https://10.0.0.46:\u0666\u0664\u0664\u0663",
                                   "bootstrap_token": "not a token", "ansible_become": True}))
    proc = run_cli("inventory", "--outputs", str(outputs), "configs/dev.yaml")
    assert proc.returncode == 1 and not proc.stdout
    assert f"{outputs}: apiserver_endpoint: expected https://<address>:<port>" in proc.stderr
    assert f"{outputs}: bootstrap_token: expected <6 chars>.<16 chars> of [a-z0-9] (value hidden)" in proc.stderr
    assert "not a token" not in proc.stderr
    assert f"{outputs}: ansible_become: not an output of the control plane" in proc.stderr


def test_bad_outputs_file_is_a_clear_error(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text("{not json")
    proc = run_cli("inventory", "--outputs", str(outputs), "configs/dev.yaml")
    assert proc.returncode == 1
    assert "outputs.json: line 1: invalid JSON" in proc.stderr


def test_pod_routes_reach_the_nodes_of_a_shared_l2_segment_only(tmp_path: Path) -> None:
    """A rack is its own segment (other racks through the site's gateway); racks naming one `segment`
    route each other's pod ranges directly (the lab's two racks on one bridge)."""
    import yaml

    from skyrack import plan as planmod

    def peers(env: Path, rack: str) -> list[str]:  # a rack's group variable
        inv = json.loads(run_cli("inventory", str(env), "--json").stdout)
        return [p["name"] for p in inv[f"rack_{rack}"]["vars"]["skyrack_segment_peers"]]

    src = ROOT / "configs/lab.yaml"
    assert peers(src, "r02") == peers(src, "r01") == ["r01-n01", "r01-n02", "r02-n01"]
    data = yaml.safe_load(src.read_text())
    for rack in data["racks"]:
        rack.pop("segment")
    env = tmp_path / "lab.yaml"
    env.write_text(yaml.safe_dump(data))
    planmod.write_lock(planmod.make(env, require_lock=False))
    assert peers(env, "r02") == ["r02-n01"] and peers(env, "r01") == ["r01-n01", "r01-n02"]
