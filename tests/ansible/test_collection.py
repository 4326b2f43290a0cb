"""The roles as installable Ansible collections, and the join's role tags.

`ansible/` is the collection skyrack.rack (galaxy.yml: its roles and the join playbook) and
`ansible/collections/ansible_collections/skyrack/node` the collection of its two modules.
Both are built with `ansible-galaxy collection build`, installed into a scratch directory
and used from there by fully-qualified names, outside the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from support import ROOT, run_cli

ANSIBLE = ROOT / "ansible"
NODE = ANSIBLE / "collections/ansible_collections/skyrack/node"
ROLES = sorted(p.name for p in (ANSIBLE / "roles").iterdir() if p.is_dir())
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    return shutil.which(name, path=str(BIN)) or name


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """No ANSIBLE_CONFIG, no ansible.cfg of the repository: only what is passed here."""
    return {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp), "ANSIBLE_NOCOLOR": "1", **extra}


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """Both collections built from their galaxy.yml and installed (offline) into a scratch directory."""
    tmp = tmp_path_factory.mktemp("collections")
    dist = tmp / "dist"
    for src in (ANSIBLE, NODE):
        proc = run([tool("ansible-galaxy"), "collection", "build", "--output-path", str(dist)], src, clean_env(tmp))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    built = sorted(dist.glob("*.tar.gz"))
    assert [p.name for p in built] == ["skyrack-node-0.1.0.tar.gz", "skyrack-rack-0.1.0.tar.gz"]
    dest = tmp / "installed"
    proc = run([tool("ansible-galaxy"), "collection", "install", "--offline", "-p", str(dest), *map(str, built)],
               tmp, clean_env(tmp))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dest


def test_the_rack_collection_holds_every_role_and_the_playbook_not_the_project_settings(installed):
    rack = installed / "ansible_collections/skyrack/rack"
    assert sorted(p.name for p in (rack / "roles").iterdir()) == ROLES
    for role in ROLES:
        for part in ("tasks/main.yml", "defaults/main.yml", "meta/main.yml", "meta/argument_specs.yml"):
            assert (rack / "roles" / role / part).read_bytes() == (ANSIBLE / "roles" / role / part).read_bytes()
    assert (rack / "playbooks/join.yml").read_bytes() == (ANSIBLE / "playbooks/join.yml").read_bytes()
    assert not (rack / "ansible.cfg").exists() and not (rack / "collections").exists()
    assert not (rack / "plugins").exists()  # the project's strategy plugin goes with its ansible.cfg
    node = installed / "ansible_collections/skyrack/node"
    assert sorted(p.name for p in (node / "plugins/modules").glob("*.py")) == ["host_facts.py", "kernel.py"]


def test_installed_roles_load_by_their_full_names(installed, tmp_path):
    """--syntax-check loads every role, its tasks and the modules they name: a missing one is an error."""
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"name": "Every skyrack.rack role", "hosts": "workers", "gather_facts": False,
                                     "roles": [{"role": f"skyrack.rack.{r}"} for r in ROLES]}], sort_keys=False))
    env = clean_env(tmp_path, ANSIBLE_COLLECTIONS_PATH=str(installed))
    for target in (str(play), "skyrack.rack.join"):
        proc = run([tool("ansible-playbook"), "-i", "localhost,", "--syntax-check", target], tmp_path, env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # the same check fails where the module collection is not installed: it proves the modules were resolved
    rack_only = tmp_path / "rack-only"
    shutil.copytree(installed / "ansible_collections/skyrack/rack", rack_only / "ansible_collections/skyrack/rack")
    proc = run([tool("ansible-playbook"), "-i", "localhost,", "--syntax-check", str(play)], tmp_path,
               clean_env(tmp_path, ANSIBLE_COLLECTIONS_PATH=str(rack_only)))
    assert proc.returncode != 0 and "skyrack.node.host_facts" in proc.stdout + proc.stderr


def test_the_built_collection_carries_no_build_leftovers(installed, tmp_path):
    proc = run([tool("ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path)], ANSIBLE,
               clean_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(tmp_path / "skyrack-rack-0.1.0.tar.gz") as tar:
        names = tar.getnames()
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".tar.gz", "ansible.cfg"))]
    assert not [n for n in names if n.startswith("collections")]


# ----------------------------------------------------------------------------- role tags


def test_every_role_has_one_tag_its_name():
    from skyrack.join import driver

    play = yaml.safe_load((ANSIBLE / "playbooks/join.yml").read_text())[0]
    assert {r["role"]: r["tags"] for r in play["roles"]} == {r["role"]: [r["role"]] for r in play["roles"]}
    # every role but the one only leave.yml runs (the reset of a node that leaves: join/departures.py)
    leave = yaml.safe_load((ANSIBLE / "playbooks/leave.yml").read_text())[0]
    assert [r["role"] for r in leave["roles"]] == ["node_reset"]
    assert sorted(driver.role_tags()) == [r for r in ROLES if r != "node_reset"]


def list_tasks(tmp_path: Path, *args: str) -> str:
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"workers": {"hosts": {"n1": {}}}}}}))
    proc = run([tool("ansible-playbook"), "-i", str(inv), "--list-tasks", *args, "join.yml"], ANSIBLE / "playbooks",
               clean_env(tmp_path, ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_tags_select_roles_and_the_report_always_runs(tmp_path):
    every = list_tasks(tmp_path)
    only = list_tasks(tmp_path, "--tags", "kubelet,kubeadm_join")
    for task in ("os_baseline : Install baseline packages", "container_runtime : Install the CNI plugins"):
        assert task in every and task not in only
    assert "kubelet : Render kubelet's per-node configuration" in only and "kubeadm_join : Render the JoinConfiguration" in only
    for task in ("Skyrack report", "Learn what this host allows (a run with --tags)"):
        assert task in only


def test_an_unknown_tag_is_refused_before_anything_runs(env_copy, tmp_path):
    runs = tmp_path / "runs"
    proc = run_cli("join", str(env_copy("dev")), "--tags", "kubelet,kublet", "--runs-dir", str(runs))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert ("--tags: no role is tagged 'kublet' (the roles' tags: os_baseline, pod_network, container_runtime, "
            "nvidia, kubelet, kubeadm_join)") in proc.stderr
    assert not runs.exists()
