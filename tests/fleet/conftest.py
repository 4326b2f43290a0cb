"""A lab of three one-node racks (no Kubernetes: light nodes) on its own bridge, for the fleet tests.

Bridge `skyrackf0`, 198.18.50.0/24: apart from the developer's lab and the other test labs. Its
Receptor mesh is the lab's own (configs/lab.yaml's `execution:`): the controller's Receptor on
the host and the execution nodes x01 and x02 as lab nodes.
Brought up by the real CLI at first use, taken down (and checked gone) at the end.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import lab_variants as variants
from lab.conftest import Lab, lab_missing
from skyrack.lab.state import Paths
from support import CONFIGS, need, run_cli

BRIDGE = "skyrackf0"
OCTET = 50
RACKS = {"r01": ["r01-n01"], "r02": ["r02-n01"], "r03": ["r03-n01"]}


# the lab tests' handle on a lab (ssh to a host, status): the same for this one
FleetLab = Lab


@pytest.fixture(scope="session")
def fleet_lab(tmp_path_factory: pytest.TempPathFactory):
    reason = lab_missing()
    if reason:
        need(reason)
    env = variants.make(CONFIGS / "lab.yaml", tmp_path_factory.mktemp("fleet"), BRIDGE, OCTET, rack_nodes=1, etcd=1,
                        apiservers=1, kubernetes=False, racks=len(RACKS))
    proc = run_cli("lab", "up", str(env), timeout=1200)
    assert proc.returncode == 0, proc.stderr
    yield FleetLab(env, Paths.for_bridge(BRIDGE))
    down = run_cli("lab", "down", str(env), timeout=300)
    assert down.returncode == 0, down.stderr
    assert not Path(f"/sys/class/net/{BRIDGE}").exists()


def join(lab: FleetLab, runs: Path, *args: str, timeout: float = 1200) -> tuple[int, dict, str]:
    proc = run_cli("join", str(lab.env), "--runs-dir", str(runs), "--json", *args, timeout=timeout)
    data = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, data, proc.stderr


def socket() -> Path:
    """The controller's Receptor control socket, which the fleet lab runs (lab/mesh.py)."""
    from skyrack.lab import mesh

    return mesh.socket_path(Paths.for_bridge(BRIDGE))


def routed(name: str) -> bool:
    from skyrack.join import receptor

    try:
        st = receptor.status(str(socket()))
    except (OSError, RuntimeError, ValueError):  # not accepting yet
        return False
    return name in (st.get("RoutingTable") or {})


def wait_routed(name: str, timeout: float = 60) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not routed(name):
        time.sleep(0.5)
    assert routed(name), f"execution node {name} is not in the lab Receptor's routing table"


def with_execution(lab: FleetLab, dest: Path, nodes: dict[str, list[str]], socket: Path | None = None) -> Path:
    """The fleet lab's environment file with other racks per execution node (and another socket)."""
    import shutil

    import yaml

    data = yaml.safe_load(lab.env.read_text())
    data["execution"]["nodes"] = [{"name": n, "racks": r} for n, r in nodes.items()]
    if socket is not None:
        data["execution"]["receptor_socket"] = str(socket)
    dest.mkdir(parents=True, exist_ok=True)
    env = dest / "lab.yaml"
    env.write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copy(lab.env.with_name("lab.lock.yaml"), dest / "lab.lock.yaml")
    return env
