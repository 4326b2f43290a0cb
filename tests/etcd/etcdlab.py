"""Fixtures for the etcd tests (import them into a test module): lab environments of their own, torn down at the end.

The default lab (bridge skyrack0, 198.18.0.0/24) may be in use by someone else on this
host: this environment uses skyetcd0 (198.18.4.0/24).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from skyrack import azurite
from skyrack import plan as planmod
from skyrack.etcd.client import Client, Tls
from skyrack.etcd.remote import Ssh
from skyrack.lab import controlplane, site
from skyrack.lab.state import Paths
from support import CONFIGS, need, run_cli  # noqa: F401  (CONFIGS: re-exported to the test modules)

ENV = """\
name: {name}
azure:
  location: westus2
  zones: ["1", "2", "3"]
  vnet_cidr: 198.18.{octet}.0/25
  admin_cidrs: [198.18.{octet}.1/32]
control_plane:
  apiservers: {{count: 1, vm_size: auto}}
  etcd: {{count: {count}, vm_size: auto, events_cluster: {events}, quota_backend_gib: 2}}
kubernetes:
  version: "1.37.2"
  pod_cidr: 10.128.0.0/16
onprem:
  cidrs: [198.18.{octet}.128/25]
mirrors:  # etcd comes from the site's Kubernetes repository, as in production
  ca: {ca}
  apt_proxy: https://198.18.{octet}.1:3142
  kubernetes: "https://198.18.{octet}.1:3142/kubernetes/core:/stable:/v1.37/deb/"
  registry: https://198.18.{octet}.1:5000
backups:
  container: etcd-snapshots
lab:
  bridge: {bridge}
  subnet: 198.18.{octet}.0/24
"""


def write_env(d: Path, name: str, bridge: str, octet: int, count: int, events: bool) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.yaml"
    path.write_text(ENV.format(name=name, bridge=bridge, octet=octet, count=count, events=str(events).lower(),
                               ca=site.SITE_CA))
    run_cli("plan", str(path), check=True)  # writes the lock file next to it
    return path


@dataclass
class EtcdLab:
    path: Path
    plan: planmod.Plan
    paths: Paths
    up_seconds: float

    @property
    def tls(self) -> Tls:
        return Tls.from_dir(controlplane.home(self.paths) / "etcd-client")

    def client(self, timeout: float = 5) -> Client:
        return Client(self.tls, timeout)

    @property
    def ssh(self) -> Ssh:
        return Ssh(self.paths.ssh_config)

    def endpoints(self, role: str = "etcd") -> list[str]:
        return [f"https://{m.ip}:2379" for m in self.plan.members_of(role)]

    def cli(self, *args: str, check: bool = True):
        return run_cli(*args, str(self.path), check=check)

    def status(self) -> list[dict]:
        return json.loads(run_cli("etcd", "status", str(self.path), "--json").stdout)["members"]


def lab_or_skip() -> None:
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        need("the etcd lab tests need root and systemd-nspawn")
    if not azurite.installed():
        need("azurite is not installed: ./dev setup")


def wait_for_stale_links(bridge: str, timeout: float = 60) -> None:
    """A node's host-side veth (vb-<bridge>...) outlives its container for a moment after `lab down`
    (the kernel tears network namespaces down asynchronously); a new node of the same name
    cannot start until it is gone."""
    prefix = f"vb-{bridge}"[:11]
    deadline = time.monotonic() + timeout
    while any(p.name.startswith(prefix) for p in Path("/sys/class/net").iterdir()):
        if time.monotonic() > deadline:
            raise AssertionError(f"interfaces {prefix}* still present {timeout:.0f} s after the last lab down")
        time.sleep(0.5)


def bring_up(tmp: Path, name: str, bridge: str, octet: int, count: int, events: bool) -> Iterator[EtcdLab]:
    lab_or_skip()
    wait_for_stale_links(bridge)
    path = write_env(tmp, name, bridge, octet, count, events)
    plan = planmod.make(path)
    paths = Paths.for_bridge(bridge)
    try:
        started = time.monotonic()
        up = run_cli("etcd", "lab-up", str(path), "--json", timeout=900)
        took = time.monotonic() - started
        print(f"\n[{name}] etcd lab-up: {took:.1f} s for {len(plan.members)} control-plane nodes", file=sys.stderr)
        assert up.returncode == 0, up.stdout + up.stderr
        yield EtcdLab(path, plan, paths, took)
    finally:
        down = run_cli("lab", "down", str(path), timeout=300)
        assert down.returncode == 0, down.stderr
        wait_for_stale_links(bridge)


@pytest.fixture(scope="module")
def lab3(tmp_path_factory) -> Iterator[EtcdLab]:
    """3 etcd members, the events cluster (3 more), one API-server node: bridge skyetcd0."""
    yield from bring_up(tmp_path_factory.mktemp("etcd3"), "etcdthree", "skyetcd0", 4, 3, True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def local_azurite(tmp_path) -> Iterator[azurite.Azurite]:
    """Azurite on loopback for tests that need Blob Storage but no lab."""
    if not azurite.installed():
        need("azurite is not installed: ./dev setup")
    a = azurite.start("127.0.0.1", free_port(), tmp_path / "azurite", tmp_path / "azurite.log")
    try:
        yield a
    finally:
        azurite.stop(a.pid)
