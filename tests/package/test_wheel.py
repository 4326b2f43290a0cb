"""skyrack as a user installs it: the wheel, in a fresh virtual environment outside the repository.

The wheel is built from the working tree's files (what git tracks or would track) with the
oldest setuptools the build floor allows, installed with its dependencies into a new venv
in a scratch directory, and every command runs there with that directory as its working
directory: nothing may come from the checkout. The join runs in check mode against a lab
of one etcd member, one API server and one worker on its own bridge (skyrackp0,
198.18.60.0/24), brought up and taken down here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import lab_variants as variants
from skyrack.gitops.git import Repo
from support import CONFIGS, ROOT, need, run_cli

pytestmark = pytest.mark.slow
BRIDGE, OCTET = "skyrackp0", 60


def floor_constraint(tmp: Path) -> Path:
    """A build-constraints file pinning setuptools to the floor pyproject.toml declares."""
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    setuptools = next(Requirement(r) for r in requires if Requirement(r).name == "setuptools")
    floor = next(s.version for s in setuptools.specifier if s.operator == ">=")
    path = tmp / "build-constraints.txt"
    path.write_text(f"setuptools=={floor}\n")
    return path


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    Repo(ROOT, CONFIGS).export(None, src)  # a copy, so the build writes nothing into the checkout
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--build-constraint",
                           str(floor_constraint(tmp)), "-w", str(tmp / "dist"), str(src)],
                          cwd=tmp, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (built,) = (tmp / "dist").glob("skyrack-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment holding the wheel and its dependencies (from the package index)."""
    tmp = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True, cwd=tmp, timeout=300)
    pip = subprocess.run([str(tmp / "venv/bin/pip"), "install", "-q", str(wheel)], cwd=tmp, capture_output=True,
                         text=True, timeout=1800)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return tmp / "venv"


def outside(venv: Path, cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The installed `skyrack`, from cwd, with no trace of the checkout in the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SKYRACK_CACHE")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", COLUMNS="200", NO_COLOR="1")
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_wheel_carries_the_playbooks_roles_collections_and_templates(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    tracked = subprocess.run(["git", "ls-files", "ansible", "modules/skyrack/templates"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    expected = {"skyrack/" + p.removeprefix("modules/skyrack/") for p in tracked if not p.endswith(".ansible-lint")}
    assert expected - names == set()
    assert "skyrack/ansible/playbooks/join.yml" in expected and "skyrack/ansible/ansible.cfg" in expected
    assert "skyrack/py.typed" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert "License-Expression: Apache-2.0" in meta
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "the license text is not in the wheel"
    assert "Requires-Dist: requests" in meta  # skyrack.etcd.client imports it


def test_validate_plan_and_inventory_run_from_the_installed_package(venv, tmp_path):
    where = outside(venv, tmp_path, "python", "-c", "import skyrack, skyrack.resources as r; "
                                                    "print(skyrack.__file__, r.ANSIBLE, r.checkout(), sep='\\n')")
    assert where.returncode == 0, where.stderr
    module, ansible, checkout = where.stdout.split("\n")[:3]
    assert module.startswith(str(venv)) and ansible.startswith(str(venv)) and checkout == "None"
    env = variants.make(CONFIGS / "lab.yaml", tmp_path / "configs", BRIDGE, OCTET, kubernetes=False)
    lock = env.with_name("lab.lock.yaml")
    lock.unlink()
    assert outside(venv, tmp_path, "skyrack", "validate", str(env)).returncode == 0
    plan = outside(venv, tmp_path, "skyrack", "plan", str(env), "--json")
    assert plan.returncode == 0, plan.stderr
    assert lock.exists() and json.loads(plan.stdout)["environment"] == "lab"
    inv = outside(venv, tmp_path, "skyrack", "inventory", str(env), "--json")
    assert inv.returncode == 0, inv.stderr
    assert json.loads(inv.stdout)["rack_r01"]["hosts"] == ["r01-n01", "r01-n02"]


def test_the_installed_package_finds_its_tools_outside_the_checkout(venv, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "azurite-blob"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    env_path = f"{tools}{os.pathsep}{os.environ['PATH']}"
    code = "from skyrack import azurite, resources; print(azurite.BIN, resources.cache_dir(), sep='\\n')"
    proc = subprocess.run([str(venv / "bin/python"), "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": env_path, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == [str(fake), str(tmp_path / "cache/skyrack")]


# ----------------------------------------------------------------------------- the join, against a lab


@pytest.fixture(scope="module")
def lab_env(tmp_path_factory):
    from lab.conftest import lab_missing

    reason = lab_missing()
    if reason:
        need(reason)
    env = variants.make(CONFIGS / "lab.yaml", tmp_path_factory.mktemp("lab"), BRIDGE, OCTET, rack_nodes=1,
                        etcd=1, kubernetes=False, racks=1, execution=False)
    up = run_cli("lab", "up", str(env), timeout=1800)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        yield env
    finally:
        down = run_cli("lab", "down", str(env), timeout=300)
        assert down.returncode == 0, down.stderr
        assert not Path(f"/sys/class/net/{BRIDGE}").exists()


def join(venv: Path, cwd: Path, env: Path, runs: Path, *args: str) -> dict:
    proc = outside(venv, cwd, "skyrack", "join", str(env), "--json", "--runs-dir", str(runs), *args, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (rack,) = json.loads(proc.stdout)["racks"]
    return rack


@pytest.mark.lab
def test_join_check_runs_the_packaged_playbook_against_the_lab(venv, lab_env, tmp_path):
    runs = tmp_path / "runs"
    # converged first: a check run on a host that never ran the roles fails where a role restarts a unit it
    # would only have written (pod_network); check mode is for hosts that converged once
    converged = join(venv, tmp_path, lab_env, runs)
    assert [(h["host"], h["result"]) for h in converged["hosts"]] == [("r01-n01", "ok")]
    envvars = json.loads((Path(converged["record"]) / "env/envvars").read_text())
    assert envvars["ANSIBLE_CONFIG"] == str(venv_site(venv) / "skyrack/ansible/ansible.cfg")
    assert envvars["ANSIBLE_CONFIG"] == str(Path(envvars["ANSIBLE_CONFIG"]).resolve()), "no symlink into a checkout"

    check = join(venv, tmp_path, lab_env, runs, "--check")
    (host,) = check["hosts"]
    assert check["check"] is True and check["tags"] == []
    assert (host["result"], host["changed"]) == ("ok", 0)
    assert host["report"], "the playbook's report came back"

    # --tags: only that role (the report has only its items); --keep-runs 1 leaves only this run's record
    only = join(venv, tmp_path, lab_env, runs, "--check", "--tags", "pod_network", "--keep-runs", "1")
    (tagged,) = only["hosts"]
    assert only["tags"] == ["pod_network"] and tagged["result"] == "ok"
    assert 0 < tagged["ok"] < host["ok"]
    items = {r["item"] for r in tagged["report"]}
    assert items and items < {r["item"] for r in host["report"]}
    assert [p for p in runs.iterdir() if not p.name.startswith(".")] == [Path(only["record"])]


def venv_site(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
