"""The lab for the tests: a variant of configs/lab.yaml on its own bridge, up once per session.

Tests that need it take `lab`; it is brought up by the real CLI at first use and taken
down (and checked gone) at the end of the session. It needs root and the lab's tools,
which `./dev setup` installs; without them the lab tests are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import lab_variants as variants
from skyrack import plan as planmod
from skyrack import upstream
from skyrack.lab.state import Paths
from support import CONFIGS, need, run_cli

BRIDGE = "skyrackt0"
OCTET = 1  # 198.18.1.0/24: apart from a developer's lab on 198.18.0.0/24


@dataclass
class Lab:
    env: Path
    paths: Paths

    def ssh(self, host: str, command: str, check: bool = True) -> str:
        proc = subprocess.run(["ssh", "-F", str(self.paths.ssh_config), "-o", "BatchMode=yes", host, command],
                              capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"{host}: {command!r} exited {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def status(self) -> dict:
        return json.loads(run_cli("lab", "status", str(self.env), "--json").stdout)

    def ready(self, wait: float = 300) -> list[dict]:
        """Wait until the cluster is ready for work the way `./dev lab` does (`skyrack lab ready`: nodes Ready,
        kube-proxy on each, CoreDNS answering from each; skyrack.kube.health); its checks. A test that
        needs an addon waits through this, never on a sleep."""
        proc = run_cli("lab", "ready", str(self.env), "--wait", str(wait), "--json", timeout=wait + 120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)["checks"]

    def image(self, name: str) -> str:
        """An upstream image the lab serves for its Kubernetes version (`pause`, `agnhost`, ...), by its
        upstream name: the reference a test pod uses, never a tag written into a test."""
        return upstream.KUBERNETES_BUILDS[planmod.make(self.env).env.kubernetes.version].images()[name]

    def nodes(self, *, all_ready: bool = True) -> list[dict]:
        """`skyrack lab nodes --json`, which exits 1 when a node is not Ready: an error unless `all_ready` is
        False (a test that takes a node away on purpose)."""
        proc = run_cli("lab", "nodes", str(self.env), "--json", timeout=120)
        assert proc.returncode == 0 or (not all_ready and proc.returncode == 1 and proc.stdout.startswith("{")), \
            proc.stdout + proc.stderr
        return json.loads(proc.stdout)["nodes"]


def lab_missing() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    missing = [t for t in ("systemd-nspawn", "debootstrap", "iptables", "ssh") if shutil.which(t) is None]
    return f"missing {', '.join(missing)} (./dev setup installs them)" if missing else None


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory):
    reason = lab_missing()
    if reason:
        need(reason)
    # with its execution nodes x01 and x02: a rack joins through Receptor too (test_join.py)
    env = variants.make(CONFIGS / "lab.yaml", tmp_path_factory.mktemp("lab"), BRIDGE, OCTET)
    seeds = tmp_path_factory.mktemp("seeds")
    # The NoCloud hook (`--seed-dir`): user-data for one host, in place of what it would get.
    (seeds / "r02-n01.yaml").write_text(
        "#cloud-config\nwrite_files:\n  - path: /etc/skyrack-seeded\n    content: seeded by the lab test\n")
    # a Kubernetes build that is not cached yet happens here (./dev test builds it before pytest)
    proc = run_cli("lab", "up", str(env), "--seed-dir", str(seeds), timeout=3600)
    assert proc.returncode == 0, proc.stderr
    # the cluster layer, by the real `pulumi up` of stacks/cluster (what ./dev lab runs before the join), run
    # as `lab up` tells a person to run it: its hint is a command that works as printed
    hint = re.search(r"the cluster layer:\s+skyrack\s+lab\s+pulumi\s+--env\s+(\S+)\s+up", proc.stderr)
    assert hint and hint.group(1) == str(env), proc.stderr
    proc = run_cli("lab", "pulumi", "--env", hint.group(1), "up", "--yes", timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    lab = Lab(env, Paths.for_bridge(BRIDGE))
    yield lab
    down = run_cli("lab", "down", str(env), timeout=300)
    assert down.returncode == 0, down.stderr
    assert not Path(f"/sys/class/net/{BRIDGE}").exists()
