"""What a running lab is made of, recorded on disk so `status`, `down` and a later `up` find it.

One lab per bridge: its state directory is ``/var/lib/skyrack/lab/<bridge>/`` (or
``$SKYRACK_LAB_STATE/<bridge>``). It holds `state.json`, the SSH key and known_hosts,
the per-node overlay layers, and logs. `down` deletes it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_ROOT = Path(os.environ.get("SKYRACK_LAB_STATE", "/var/lib/skyrack/lab"))


@dataclass
class Host:
    """One lab host: a control-plane member or a rack node."""

    name: str
    ip: str
    role: str  # apiserver | etcd | etcd-events | worker | execution
    pid: int | None = None  # the systemd-nspawn launcher


@dataclass
class LabState:
    env: str
    source: str
    bridge: str
    subnet: str
    host_ip: str
    image: str = ""
    proxy_pid: int | None = None
    proxy_serves: dict[str, str] = field(default_factory=dict)  # URL prefix -> directory (the Kubernetes repo)
    registry_pid: int | None = None  # only when the lab builds Kubernetes
    azurite_pid: int | None = None  # only when the environment has `backups:`
    receptor_pid: int | None = None  # the controller's Receptor, only with an `execution:` section
    balancer_pid: int | None = None  # haproxy, the API servers' load balancer (skyrack.lab.balancer)
    balancer_config: str = ""  # what it was started with (balancer.fingerprint)
    kwok_pid: int | None = None  # KWOK, while a simulated fleet is up (skyrack.lab.fleet)
    rules: list[list[str]] = field(default_factory=list)  # iptables rules added (without -A/-D)
    hosts: dict[str, Host] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict) -> LabState:
        hosts = {k: Host(**v) for k, v in data.pop("hosts", {}).items()}
        return cls(**data, hosts=hosts)


@dataclass(frozen=True)
class Paths:
    root: Path

    @classmethod
    def for_bridge(cls, bridge: str) -> Paths:
        return cls(STATE_ROOT / bridge)

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    @property
    def key(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.ssh_dir / "config"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    @property
    def proxy_cache(self) -> Path:
        # Shared by every lab and kept across `down`: /pool/ files never change.
        from .image import CACHE_DIR

        return CACHE_DIR / "apt-proxy"

    def node_dir(self, name: str) -> Path:
        return self.root / "nodes" / name


def load(paths: Paths) -> LabState | None:
    if not paths.state.exists():
        return None
    return LabState.from_dict(json.loads(paths.state.read_text()))


def save(paths: Paths, st: LabState) -> None:
    paths.root.mkdir(parents=True, exist_ok=True)
    tmp = paths.state.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(st), indent=2) + "\n")
    tmp.replace(paths.state)
