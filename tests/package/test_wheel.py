"""skyrack as a user installs it: the wheel, in a fresh virtual environment outside the repository.

The wheel is built from the working tree's files (what git tracks or would track) with the
oldest setuptools the build floor allows, installed with its dependencies and its `pulumi`
extra (the Pulumi SDKs) into a new venv in a scratch directory, and every command runs there
with that directory as its working directory: nothing may come from the checkout. The Pulumi
programs and the policy pack are package data: the cluster layer's program runs from there
under Pulumi's mocks (no Pulumi CLI here), the way tests/kube runs it from the checkout. The join runs in check mode against a lab
of one etcd member, one API server and one worker on its own bridge (skyrackp0,
198.18.60.0/24), brought up and taken down here.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

import lab_variants as variants
from skyrack.gitops.git import Repo
from support import CONFIGS, ROOT, need, policy_pack_declared, run_cli

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
    pip = subprocess.run([str(tmp / "venv/bin/pip"), "install", "-q", f"{wheel}[pulumi]"], cwd=tmp, capture_output=True,
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
    tracked = subprocess.run(["git", "ls-files", "ansible", "stacks", "policy", "modules/skyrack/templates"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    expected = {"skyrack/" + p.removeprefix("modules/skyrack/") for p in tracked
                if not Path(p).name.startswith(".")}  # .ansible-lint, policy/.gitignore: not package data
    assert expected - names == set()
    assert {"skyrack/ansible/playbooks/join.yml", "skyrack/ansible/ansible.cfg", "skyrack/stacks/cluster/__main__.py",
            "skyrack/stacks/lab/Pulumi.yaml", "skyrack/stacks/controlplane.py",
            "skyrack/policy/PulumiPolicy.yaml"} <= expected
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


def test_diff_runs_from_the_installed_package(venv, tmp_path):
    """`skyrack diff` of a repository that holds environment files and no skyrack code (a team's own repository
    with skyrack installed from the wheel): each revision is derived by the installed code."""
    repo = tmp_path / "team"
    (repo / "configs").mkdir(parents=True)
    for name in ("dev.yaml", "dev.lock.yaml"):
        shutil.copy(CONFIGS / name, repo / "configs" / name)
    ident = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env={**os.environ, **ident})

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "base")
    dev = repo / "configs" / "dev.yaml"
    dev.write_text(dev.read_text().replace("{name: robotics, gpu_quota: 32}", "{name: robotics, gpu_quota: 24}", 1))
    git("commit", "-qam", "a smaller quota")
    proc = outside(venv, repo, "skyrack", "diff", "HEAD~1", "HEAD", "--format", "json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["ok"] is True, report
    text = json.dumps(report)
    assert "robotics" in text and "24" in text, text[:3000]


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


# the cluster layer's program from the installed package, under Pulumi's mocks; the StackReference answered with
# the control-plane stack's outputs (argv[1], JSON); the environment file argv[2]; the workspace argv[3]
CLUSTER_UNDER_MOCKS = r"""
import json, runpy, sys
from pathlib import Path
import pulumi
from skyrack.engine import Workspace
from skyrack.lab import stacks

outputs = json.loads(Path(sys.argv[1]).read_text())
refs, made = [], []

class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        if args.typ == "pulumi:pulumi:StackReference":
            refs.append(args.inputs["name"])
            return args.name, {"name": args.inputs["name"], "outputs": outputs,
                               "secretOutputNames": ["bootstrap_token", "admin_kubeconfig"]}
        made.append(f"{args.typ} {args.name}")
        return f"{args.name}-id", args.inputs

    def call(self, args):
        return {}, None

program = stacks.project_dir(Workspace(None, Path(sys.argv[3])).create(), stacks.CLUSTER_DIR)
pulumi.runtime.set_mocks(Mocks(), project="skyrack-cluster", stack="dev", preview=True, organization="acme")
pulumi.runtime.set_config("skyrack-cluster:environment", sys.argv[2])
pulumi.runtime.test(lambda: runpy.run_path(str(program / "__main__.py")))()
print(json.dumps({"stacks": str(stacks.STACKS), "program": str(program), "refs": refs, "made": made}))
"""


def test_lab_pulumi_finds_the_packaged_stacks(venv, tmp_path):
    help_ = outside(venv, tmp_path, "skyrack", "lab", "pulumi", "--help")
    assert help_.returncode == 0, help_.stderr
    assert "Run the built Pulumi on the lab's cluster-layer stack" in help_.stdout
    where = outside(venv, tmp_path, "python", "-c", "from skyrack.lab import stacks; "
                                                    "print(stacks.CLUSTER_DIR, stacks.CONTROLPLANE_DIR, sep='\\n')")
    assert where.returncode == 0, where.stderr
    cluster_dir, controlplane_dir = (Path(p) for p in where.stdout.split("\n")[:2])
    site = venv_site(venv) / "skyrack/stacks"
    assert (cluster_dir, controlplane_dir) == (site / "cluster", site / "lab")
    assert (cluster_dir / "__main__.py").read_text() == (ROOT / "stacks/cluster/__main__.py").read_text()
    assert (controlplane_dir / "Pulumi.yaml").is_file()


def test_the_cluster_layer_program_runs_from_the_installed_package(venv, tmp_path):
    from kube.conftest import make_ca, run_program
    from kube.test_stack import PROGRAM, WithControlPlaneStack, control_plane_stack

    outputs = control_plane_stack(make_ca(), "https://10.0.1.4:6443")
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    env = tmp_path / "configs/dev.yaml"
    env.parent.mkdir()
    for name in ("dev.yaml", "dev.lock.yaml"):
        (env.parent / name).write_bytes((CONFIGS / name).read_bytes())
    proc = outside(venv, tmp_path, "python", "-c", CLUSTER_UNDER_MOCKS, str(tmp_path / "outputs.json"), str(env),
                   str(tmp_path / "ws"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = json.loads(proc.stdout.splitlines()[-1])
    assert ran["stacks"] == str(venv_site(venv) / "skyrack/stacks")
    # from a wheel Pulumi runs a copy in the workspace whose Pulumi.yaml names no virtualenv inside site-packages
    assert ran["program"] == str(tmp_path / "ws/programs/cluster")
    project = yaml.safe_load((tmp_path / "ws/programs/cluster/Pulumi.yaml").read_text())
    assert project["name"] == "skyrack-cluster" and "virtualenv" not in project["runtime"]["options"]
    assert ran["refs"] == ["acme/skyrack/dev"]
    # the same objects as the checkout's program under the same mocks
    import pulumi

    pulumi.runtime.set_all_config({"skyrack-cluster:environment": str(env)})
    try:
        here = run_program("dev", lambda: runpy.run_path(str(PROGRAM)), preview=True,
                           rec=WithControlPlaneStack(outputs=outputs))
    finally:
        pulumi.runtime.set_all_config({})
    assert len(ran["made"]) > 50 and sorted(ran["made"]) == sorted(f"{r.typ} {r.name}" for r in here)  # registered concurrently


def test_the_packaged_policy_pack_finds_the_installed_skyrack(venv):
    found = policy_pack_declared(str(venv / "bin/python"), venv_site(venv) / "skyrack/policy")
    assert found["declared"] == [["skyrack", ["apiserver-not-public", "etcd-isolated"]]]
    assert found["skyrack"] == str(venv_site(venv) / "skyrack/__init__.py")


# ----------------------------------------------------------------------------- the join, against a lab


@pytest.fixture(scope="module")
def lab_env(tmp_path_factory):
    from lab.conftest import lab_missing

    reason = lab_missing()
    if reason:
        need(reason)
    env = variants.make(CONFIGS / "lab.yaml", tmp_path_factory.mktemp("lab"), BRIDGE, OCTET, rack_nodes=1,
                        etcd=1, apiservers=1, kubernetes=False, racks=1, execution=False)
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
