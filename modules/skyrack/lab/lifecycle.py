"""`lab up`, `status` and `down`: bring the hosts of a lab environment to life and back to nothing.

`up` converges: whatever already runs and matches the environment is kept, missing or
crashed parts (bridge, rules, proxy, nodes) are (re)made, hosts no longer in the file
are removed. So `up` twice is a no-op and `up` after a crash recovers.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import azurite, daemon
from .. import plan as planmod
from ..errors import InputError, Problem
from . import controlplane, image, network, nodes, ssh
from .state import Host, LabState, Paths, load, save

PROXY_PORT = 3142
TOOLS = ("systemd-nspawn", "debootstrap", "iptables", "ssh", "ssh-keygen", "ip")
Say = Callable[[str], None]


class LabError(RuntimeError):
    """The lab cannot be brought up here (not root, a tool missing, a node that does not boot)."""


@dataclass(frozen=True)
class Lab:
    plan: planmod.Plan
    paths: Paths

    @property
    def cfg(self):  # the environment's `lab:` section
        assert self.plan.env.lab is not None
        return self.plan.env.lab

    @property
    def proxy_url(self) -> str:
        return f"http://{self.cfg.host_ip}:{PROXY_PORT}"

    def hosts(self) -> list[Host]:
        return ([Host(m.name, m.ip, m.role) for m in self.plan.members]
                + [Host(n.name, n.ip, "worker") for n in self.plan.nodes])


def open_lab(env_path: Path) -> Lab:
    """Plan a lab environment; InputError if it is not one, or its proxy setting disagrees."""
    p = planmod.make(env_path)
    if p.env.lab is None:
        raise InputError([Problem(str(env_path), "lab", "not a lab environment (no `lab:` section); "
                                                        "the lab runs only environments made for this machine")])
    lab = Lab(p, Paths.for_bridge(p.env.lab.bridge))
    if p.env.mirrors.apt_proxy not in (None, lab.proxy_url):
        raise InputError([Problem(str(env_path), "mirrors.apt_proxy",
                                  f"the lab's apt proxy listens on {lab.proxy_url}; set that or leave it out")])
    return lab


def check_host() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, mounts, iptables); run it as root")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise LabError(f"missing on this host: {', '.join(missing)}; `./dev setup` installs them")


def up(env_path: Path, user_data: Mapping[str, str] | None = None, say: Say = print,
       timeout: float = 120) -> LabState:
    """Start every host of the environment (see the module docstring). `user_data` maps a
    host name to its cloud-init user-data (NoCloud seed), read on the node's first boot."""
    lab = open_lab(env_path)
    unknown = sorted(set(user_data or {}) - {h.name for h in lab.hosts()})
    if unknown:
        raise InputError([Problem(str(env_path), "", f"cloud-init user-data for hosts not in this lab: "
                                                     f"{', '.join(unknown)}")])
    check_host()
    cfg, paths = lab.cfg, lab.paths
    st = load(paths) or LabState(env=lab.plan.env.name, source=str(env_path), bridge=cfg.bridge,
                                 subnet=str(cfg.subnet), host_ip=str(cfg.host_ip))
    st.env, st.source = lab.plan.env.name, str(env_path)
    paths.log_dir.mkdir(parents=True, exist_ok=True)
    img = image.ensure(cfg.suite, paths.log_dir / "image.log", say)
    st.image = str(img.rootfs)
    network.ensure_bridge(cfg.bridge, str(cfg.host_ip), str(cfg.subnet))
    st.rules = network.ensure_rules(cfg.bridge, str(cfg.subnet))
    if not proxy_alive(st.proxy_pid):
        st.proxy_pid = start_proxy(paths, lab.proxy_url)
        say(f"apt proxy on {lab.proxy_url} (pid {st.proxy_pid})")
    if controlplane.backups_configured(lab.plan) and not azurite.alive(st.azurite_pid):
        st.azurite_pid = controlplane.start_azurite(lab.plan, paths, say)
    save(paths, st)

    wanted = {h.name: h for h in lab.hosts()}
    for name in [n for n in st.hosts if n not in wanted]:
        say(f"removing {name} (no longer in {env_path})")
        nodes.stop(paths, st.hosts[name], cfg.bridge)
        nodes.remove(paths, name)
        del st.hosts[name]
    pub = ssh.ensure_key(paths)
    prefix = ipaddress.IPv4Network(cfg.subnet).prefixlen
    started: list[Host] = []
    for name, want in wanted.items():
        host = st.hosts.get(name)
        if host is not None and nodes.alive(host, cfg.bridge):
            continue
        if host is not None:  # crashed or stopped: clear what is left of it before booting again
            nodes.stop(paths, host, cfg.bridge)
        host = Host(want.name, want.ip, want.role)
        root = nodes.mount(paths, name, img.rootfs)
        stamp = paths.node_dir(name) / "personalised"
        if not stamp.exists():
            nodes.personalise(root, host, str(cfg.host_ip), prefix, lab.proxy_url, pub,
                              (user_data or {}).get(name))
            stamp.touch()
        host.pid = nodes.start(paths, host, cfg.bridge)
        st.hosts[name] = host
        started.append(host)
        save(paths, st)
    ssh.write(paths, list(st.hosts.values()),
              {n: nodes.host_keys(nodes.merged(paths, n)) for n in st.hosts})
    if started:
        say(f"booting {len(started)} node(s): {', '.join(h.name for h in started)}")
        wait_ready(lab, started, timeout)
    save(paths, st)
    return st


def wait_ready(lab: Lab, hosts: list[Host], timeout: float) -> None:
    """Wait for SSH (with the host key checked) and for cloud-init to finish on each host."""
    deadline = time.monotonic() + timeout

    def ready(h: Host) -> str | None:
        if not nodes.wait_ssh(h.ip, deadline):
            return f"{h.name}: SSH did not answer within {timeout:.0f} s (log: {lab.paths.log_dir / h.name}.log)"
        while time.monotonic() < deadline:
            r = ssh.run(lab.paths, h.name, "cat /run/cloud-init/result.json 2>/dev/null", timeout=10)
            if r.returncode == 0 and r.stdout.strip():
                errors = json.loads(r.stdout).get("v1", {}).get("errors", [])
                return f"{h.name}: cloud-init finished with errors: {errors}" if errors else None
            if r.returncode == 255:  # ssh itself failed, e.g. a host key mismatch: do not retry blindly
                if "Host key verification failed" in r.stderr:
                    return f"{h.name}: {r.stderr.strip()}"
            time.sleep(0.5)
        return f"{h.name}: cloud-init did not finish within {timeout:.0f} s"

    with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
        problems = [p for p in pool.map(ready, hosts) if p]
    if problems:
        raise LabError("; ".join(problems))


PROXY_MARKER = "skyrack.lab.proxy"


def proxy_alive(pid: int | None) -> bool:
    return daemon.alive(pid, PROXY_MARKER)


def start_proxy(paths: Paths, url: str) -> int:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return daemon.start([sys.executable, "-m", PROXY_MARKER, "--listen", f"{host}:{port}",
                         "--cache", str(paths.proxy_cache)],
                        name="the apt proxy", listen=(host, int(port)), log=paths.log_dir / "apt-proxy.log",
                        timeout=10, error=LabError, env=env)


def stop_host(env_path: Path, name: str) -> None:
    """Power a node off (its disk is kept; `up` boots it again)."""
    lab = open_lab(env_path)
    st = load(lab.paths)
    if st is None or name not in st.hosts:
        raise InputError([Problem(str(env_path), "", f"no lab host named {name!r} is up")])
    nodes.stop(lab.paths, st.hosts[name], lab.cfg.bridge)
    save(lab.paths, st)


def down(env_path: Path, say: Say = print) -> list[str]:
    """Remove everything `up` made: nodes (by PID), their disks, the proxy, rules, bridge, state."""
    lab = open_lab(env_path)
    check_host()
    paths, bridge = lab.paths, lab.cfg.bridge
    st = load(paths)
    done: list[str] = []
    if st is not None:
        hosts = list(st.hosts.values())
        with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
            list(pool.map(lambda h: nodes.stop(paths, h, bridge), hosts))
        done += [f"stopped {h.name}" for h in hosts]
        if daemon.stop(st.proxy_pid, PROXY_MARKER):
            done.append(f"stopped the apt proxy (pid {st.proxy_pid})")
        if daemon.stop(st.azurite_pid, azurite.MARKER):
            done.append(f"stopped Azurite (pid {st.azurite_pid})")
    node_root = paths.root / "nodes"
    if node_root.is_dir():
        for d in node_root.iterdir():
            nodes.remove(paths, d.name)
    network.remove_rules(network.forward_rules(bridge, str(lab.cfg.subnet)))
    if network.bridge_exists(bridge):
        network.remove_bridge(bridge)
        done.append(f"removed bridge {bridge}")
    shutil.rmtree(paths.root, ignore_errors=True)
    for line in done:
        say(line)
    return done


@dataclass(frozen=True)
class HostStatus:
    name: str
    ip: str
    role: str
    running: bool
    ssh: bool


def status(env_path: Path) -> dict:
    lab = open_lab(env_path)
    st = load(lab.paths)
    hosts = []
    for want in lab.hosts():
        h = st.hosts.get(want.name) if st else None
        running = bool(h and nodes.alive(h, lab.cfg.bridge))
        answering = running and nodes.wait_ssh(want.ip, time.monotonic() + 1.5)
        hosts.append(HostStatus(want.name, want.ip, want.role, running, answering).__dict__)
    return {
        "environment": lab.plan.env.name,
        "state_dir": str(lab.paths.root),
        "up": st is not None,
        "bridge": network.bridge_exists(lab.cfg.bridge),
        "rules": bool(st) and network.rules_present(network.forward_rules(lab.cfg.bridge, str(lab.cfg.subnet))),
        "apt_proxy": lab.proxy_url if st and proxy_alive(st.proxy_pid) else None,
        "ssh_config": str(lab.paths.ssh_config) if st else None,
        "hosts": hosts,
    }
