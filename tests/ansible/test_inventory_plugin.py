"""The collection's inventory plugin (skyrack.node.environment): Ansible itself reads an environment file.

`ansible-inventory` (what AWX runs for an inventory source) with a `*.skyrack.yml` naming the
environment gives exactly what `skyrack inventory --json` prints; the control plane's public outputs
come in, its secrets never; a value that looks like a template stays text; a bad environment is one
error naming the file and field.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from support import CONFIGS, ROOT, run_cli

BIN = Path(sys.executable).parent
COLLECTIONS = ROOT / "ansible" / "collections"


def ansible_inventory(source: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    """`ansible-inventory --list --export`, with only the collection on its path and no project ansible.cfg."""
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_INVENTORY_ENABLED": "skyrack.node.environment",
           "PYTHONPATH": str(ROOT / "modules"),
           # a source that does not parse is an error, not a warning and an empty inventory (AWX: the same)
           "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"}
    tool = shutil.which("ansible-inventory", path=str(BIN)) or "ansible-inventory"
    return subprocess.run([tool, "-i", str(source), "--list", "--export"], cwd=tmp, env=env, capture_output=True,
                          text=True, timeout=300)


def source(tmp: Path, name: str = "lab.skyrack.yml", **options: str) -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump({"plugin": "skyrack.node.environment", **options}))
    return path


def plain(value):
    """`skyrack inventory --json`'s unsafe markers taken off (ansible-inventory prints the text itself)."""
    if isinstance(value, dict):
        return value["__ansible_unsafe"] if set(value) == {"__ansible_unsafe"} else {k: plain(v) for k, v in
                                                                                  value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def test_ansible_reads_what_skyrack_inventory_prints(tmp_path: Path):
    proc = ansible_inventory(source(tmp_path, environment=str(CONFIGS / "dev.yaml")), tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = plain(json.loads(proc.stdout))
    want = plain(json.loads(run_cli("inventory", str(CONFIGS / "dev.yaml"), "--json", check=True).stdout))
    assert got["_meta"]["hostvars"] == want["_meta"]["hostvars"]
    for group, body in want.items():
        if group == "_meta":
            continue
        assert sorted(got[group].get("hosts", [])) == sorted(body.get("hosts", [])), group
        children = [sorted(c for c in g.get("children", []) if c != "ungrouped") for g in (got[group], body)]
        assert children[0] == children[1], group
        assert got[group].get("vars", {}) == body.get("vars", {}), group


def test_public_outputs_come_in_and_secrets_never(tmp_path: Path):
    outputs = {"apiserver_endpoint": "https://10.0.0.10:6443", "ca_cert_hash": "sha256:" + "a" * 64,
               "bootstrap_token": "abcdef.0123456789abcdef"}
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    proc = ansible_inventory(source(tmp_path, environment=str(CONFIGS / "dev.yaml"), outputs="outputs.json"),
                             tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert plain(json.loads(proc.stdout)["all"]["vars"]["skyrack_cp_apiserver_endpoint"]) == "https://10.0.0.10:6443"
    assert "0123456789abcdef" not in proc.stdout


def test_a_bad_environment_is_one_error_naming_file_and_field(tmp_path: Path):
    data = yaml.safe_load((CONFIGS / "dev.yaml").read_text())
    data["control_plane"]["etcd"]["count"] = 4
    (tmp_path / "dev.yaml").write_text(yaml.safe_dump(data))
    shutil.copy(CONFIGS / "dev.lock.yaml", tmp_path / "dev.lock.yaml")
    proc = ansible_inventory(source(tmp_path, environment="dev.yaml"), tmp_path)
    assert proc.returncode != 0
    assert "dev.yaml: control_plane.etcd.count: 4 is even" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
