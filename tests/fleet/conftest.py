"""A lab of three one-node racks (no Kubernetes: light nodes) on its own bridge, for the fleet tests.

Bridge `skyrackf0`, 198.18.50.0/24: apart from the developer's lab and the other test labs.
Brought up by the real CLI at first use, taken down (and checked gone) at the end.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from dataclasses import dataclass
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
                        kubernetes=False, racks=len(RACKS))
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


@dataclass
class Mesh:
    """A Receptor mesh: a controller node (the control socket skyrack talks to) and execution nodes."""

    dir: Path
    receptor: Path
    port: int
    procs: dict[str, subprocess.Popen]

    @property
    def socket(self) -> Path:
        return self.dir / "controller.sock"

    def start(self, name: str) -> None:
        import os
        import sys
        import time

        cfg = self.dir / f"{name}.yaml"
        if name == "controller":
            cfg.write_text(f"- node: {{id: controller, datadir: {self.dir / name}}}\n"
                           f"- control-service: {{service: control, filename: {self.socket}}}\n"
                           f"- tcp-listener: {{port: {self.port}, bindaddr: 127.0.0.1}}\n")
        else:  # an execution node: dials the controller, runs `ansible-runner worker` for each work unit
            runner = Path(sys.executable).parent / "ansible-runner"
            cfg.write_text(f"- node: {{id: {name}, datadir: {self.dir / name}}}\n"
                           f"- control-service: {{service: control, filename: {self.dir / name}.sock}}\n"
                           f"- tcp-peer: {{address: '127.0.0.1:{self.port}', redial: true}}\n"
                           f"- work-command: {{worktype: ansible-runner, command: {runner}, params: worker, "
                           f"allowruntimeparams: true}}\n")
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        log = (self.dir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen([str(self.receptor), "--config", str(cfg)], stdout=log, stderr=log,
                                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self.routed(name) and self.procs[name].poll() is None:
            time.sleep(0.2)
        assert self.routed(name), (self.dir / f"{name}.log").read_text()

    def routed(self, name: str) -> bool:
        if not self.socket.exists():
            return False
        from skyrack.join import receptor

        try:
            st = receptor.status(str(self.socket))
        except (OSError, ValueError):  # not accepting yet
            return False
        return name == st.get("NodeID") or name in (st.get("RoutingTable") or {})

    def stop(self, name: str, lost: bool = False) -> None:
        """Stop a node; `lost`: as a machine that dies, everything on it at once (receptor and its workers)."""
        import os
        import signal

        proc = self.procs.pop(name)
        if lost:
            for pid in [*descendants(proc.pid), proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        else:
            proc.terminate()
        proc.wait(timeout=30)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


@pytest.fixture(scope="session")
def mesh(tmp_path_factory: pytest.TempPathFactory):
    from skyrack.build import receptor as receptor_build

    d = tmp_path_factory.mktemp("mesh")
    m = Mesh(d, receptor_build.binary(say=lambda _m: None), 27250, {})
    try:
        m.start("controller")
        for name in ("x01", "x02"):
            m.start(name)
        yield m
    finally:
        for name in list(m.procs):
            m.stop(name)


def with_execution(lab: FleetLab, dest: Path, socket: Path, nodes: dict[str, list[str]]) -> Path:
    """The fleet lab's environment file plus an `execution:` section (and its lock file)."""
    import shutil

    import yaml

    data = yaml.safe_load(lab.env.read_text())
    data["execution"] = {"receptor_socket": str(socket), "nodes": [{"name": n, "racks": r} for n, r in nodes.items()]}
    dest.mkdir(parents=True, exist_ok=True)
    env = dest / "lab.yaml"
    env.write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copy(lab.env.with_name("lab.lock.yaml"), dest / "lab.lock.yaml")
    return env
