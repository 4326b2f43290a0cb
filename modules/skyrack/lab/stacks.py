"""The lab's Pulumi stacks: its stand-in control-plane stack, and the cluster layer on top of it.

Each lab has one Pulumi workspace (skyrack.engine) in its root-only state directory: a file
backend, the engine's home, the stacks' config files and the passphrase of their secrets.
Two projects live in it, exactly as in Azure:

* `skyrack` (stacks/lab/, the stand-in for the Azure program in stacks/), stack
  `<env>`: `skyrack lab up` runs its `pulumi up` once the API servers answer; it exports the
  control plane's outputs through the contract;
* `skyrack-cluster` (stacks/cluster/, the cluster layer, unchanged), stack `<env>`: run with
  `skyrack lab pulumi --env <env> up` (what `./dev lab` does before the join). It reads the stand-in
  through its StackReference `organization/skyrack/<env>`, as it reads the Azure stack.

The join's outputs file is `pulumi stack output --json --show-secrets` of the stand-in, the
same command a rack run uses in Azure.

The programs are package data (`skyrack.resources.STACKS`: the repository's stacks/ in a
checkout, files in an installed wheel). In a checkout Pulumi runs them in place, their
Pulumi.yaml naming the checkout's `.venv`; from an installed package, in a copy whose
Pulumi.yaml names no virtualenv (`project_dir`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from .. import outputs as contract
from .. import resources
from ..build.pulumi import Engine
from ..engine import ORGANIZATION, EngineError, Say, Workspace
from ..files import write_private
from .state import Paths, load

STACKS = resources.STACKS.resolve()  # resolved: in a checkout, Pulumi.yaml's ../../.venv is then the checkout's
CONTROLPLANE_DIR = STACKS / "lab"  # the stand-in for the Azure program
CLUSTER_DIR = STACKS / "cluster"


def project_dir(ws: Workspace, program: Path) -> Path:
    """The directory Pulumi runs `program` in. In a checkout, the program's own. An installed package's
    program has no virtualenv beside it (its Pulumi.yaml's `../../.venv` is a directory inside
    site-packages, which the engine would look for or create): a copy in the workspace, its Pulumi.yaml
    naming none, so the engine runs the program with skyrack's own Python (`PULUMI_PYTHON_CMD`)."""
    if resources.checkout() is not None:
        return program
    staged = ws.root / "programs" / program.name
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(program, staged, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "Pulumi.*.yaml"))
    project = yaml.safe_load((program / "Pulumi.yaml").read_text())
    runtime = project.get("runtime")
    if isinstance(runtime, dict) and isinstance(runtime.get("options"), dict):
        runtime["options"].pop("virtualenv", None)
    (staged / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
    return staged


def project_name(project_dir: Path) -> str:
    """The project's name, as its Pulumi.yaml declares it (StackReferences are spelled with it)."""
    return yaml.safe_load((project_dir / "Pulumi.yaml").read_text())["name"]


def workspace(paths: Paths, engine: Engine) -> Workspace:
    return Workspace(engine, paths.root / "pulumi").create()


def controlplane_up(ws: Workspace, env_path: Path, stack: str, say: Say | None = None) -> None:
    """`pulumi up` of the stand-in stack (creating it first): its outputs are the lab control plane's."""
    program = project_dir(ws, CONTROLPLANE_DIR)
    project = project_name(program)
    ws.ensure_stack(program, project, stack)
    ws.set_config(program, project, stack, {"skyrack:environment": str(env_path.resolve())})
    ws.run(program, ["up", "--yes", "--skip-preview", "--suppress-progress"], stack=stack,
           project=project, say=say, what=f"pulumi up of the lab's control-plane stack {stack}")


def stack_outputs(ws: Workspace, env_path: Path, stack: str) -> dict:
    """The stand-in stack's outputs, secrets included, checked against the contract."""
    project = project_name(CONTROLPLANE_DIR)
    if not ws.stack_exists(project, stack):
        raise EngineError(f"the lab's control-plane stack {ORGANIZATION}/{project}/{stack} does not exist in "
                          f"{ws.backend}: run `skyrack lab up {env_path}` first")
    out = ws.run(project_dir(ws, CONTROLPLANE_DIR), ["stack", "output", "--json", "--show-secrets"], stack=stack,
                 project=project, what=f"reading the outputs of stack {stack}")
    return contract.validate(json.loads(out), f"stack {ORGANIZATION}/{project}/{stack}",
                             required=contract.LAB_STAND_IN)


def write_outputs(ws: Workspace, env_path: Path, stack: str, dest: Path, kubeconfig: Path) -> dict:
    """The join's outputs file and the admin kubeconfig, from the stand-in stack (both 0600)."""
    data = stack_outputs(ws, env_path, stack)
    contract.write_file(dest, data)
    write_private(kubeconfig, data["admin_kubeconfig"])
    return data


def require_up(paths: Paths, env_path: Path) -> None:
    """EngineError naming `skyrack lab up` when the lab has never been brought up (before anything is built)."""
    if load(paths) is None:
        raise EngineError(f"{env_path}: the lab is not up: run `skyrack lab up {env_path}` first")


def cluster(ws: Workspace, paths: Paths, env_path: Path, stack: str, args: list[str], say: Say | None = None) -> str:
    """A Pulumi command (`up`, `preview`, `destroy`, ...) on the cluster layer's stack of this lab."""
    require_up(paths, env_path)
    cp = project_name(CONTROLPLANE_DIR)
    if not ws.stack_exists(cp, stack):
        raise EngineError(f"the cluster layer reads the control-plane stack {ORGANIZATION}/{cp}/{stack}, which "
                          f"does not exist in {ws.backend}: run `skyrack lab up {env_path}` (it creates it)")
    program = project_dir(ws, CLUSTER_DIR)
    project = project_name(program)
    ws.ensure_stack(program, project, stack)
    ws.set_config(program, project, stack, {"skyrack-cluster:environment": str(env_path.resolve())})
    return ws.run(program, args, stack=stack, project=project, say=say,
                  what=f"pulumi {' '.join(args[:1])} of the cluster layer (stack {stack})")
