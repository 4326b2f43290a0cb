"""The lab's stand-in for the API servers' Azure internal load balancer: Debian's haproxy on the lab host.

Production's endpoint is the load balancer's frontend, `plan.apiserver_lb_ip` (azure/apiservers.py); the lab's
is the same address, held by the lab host on the lab's bridge and served by haproxy with Azure's rule: layer 4
on 6443 to every API server, a server taken out after `LB_PROBE_THRESHOLD` failed probes of its `/readyz`
`LB_PROBE_INTERVAL_S` apart and back after one success (skyrack.tuning, which also derives the API servers'
shutdown delay from them). The API servers reach the address as in Azure, through their hairpin rule
(templates/cloud-init/apiserver-hairpin.service.j2); kubelets, the join, `kubectl` and Pulumi through haproxy.

One haproxy per lab, its configuration in the lab's state directory (rendered by Jinja2 like every file
skyrack writes for a machine), restarted by `lab up` when the API servers it balances change.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from .. import daemon
from ..plan import Plan
from ..render import render
from ..tuning import LB_PROBE_INTERVAL_S, LB_PROBE_THRESHOLD
from .state import Paths

MARKER = "skyrack-lab-balancer"  # in haproxy's command line (its configuration file's name)
PORT = 6443


class BalancerError(RuntimeError):
    """haproxy is missing, refuses its configuration or does not listen."""


def config_path(paths: Paths) -> Path:
    return paths.root / f"{MARKER}.cfg"


def ca_path(paths: Paths) -> Path:
    return paths.root / f"{MARKER}-ca.crt"


def config(plan: Plan, paths: Paths) -> str:
    return render("lab/haproxy.cfg.j2", env_name=plan.env.name, lb_ip=plan.apiserver_lb_ip, port=PORT,
                  members=plan.members_of("apiserver"), ca_file=str(ca_path(paths)),
                  interval_s=LB_PROBE_INTERVAL_S, threshold=LB_PROBE_THRESHOLD)


def fingerprint(plan: Plan, paths: Paths, ca_pem: str) -> str:
    """What a running haproxy was started with: a change restarts it."""
    return hashlib.sha256((config(plan, paths) + ca_pem).encode()).hexdigest()[:16]


def alive(pid: int | None) -> bool:
    return daemon.alive(pid, MARKER)


def check(cfg: Path) -> None:
    """haproxy's own check of a configuration file."""
    binary = shutil.which("haproxy")
    if binary is None:
        raise BalancerError("haproxy is not installed (Debian's haproxy: ./dev setup installs it)")
    proc = subprocess.run([binary, "-c", "-q", "-f", str(cfg)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BalancerError(f"haproxy refuses {cfg}: {(proc.stderr or proc.stdout).strip()}")


def start(plan: Plan, paths: Paths, ca_pem: str) -> int:
    """Write the configuration and the cluster CA the probe verifies with, check it, start haproxy in the
    foreground of its own session; its PID once it listens on the frontend."""
    cfg = config_path(paths)
    paths.root.mkdir(parents=True, exist_ok=True)
    ca_path(paths).write_text(ca_pem)
    cfg.write_text(config(plan, paths))
    check(cfg)
    return daemon.start(["haproxy", "-db", "-f", str(cfg)], name="the API servers' load balancer (haproxy)",
                        listen=(plan.apiserver_lb_ip, PORT), log=paths.log_dir / "balancer.log", timeout=15,
                        error=BalancerError)


def stop(pid: int | None) -> bool:
    return daemon.stop(pid, MARKER)
