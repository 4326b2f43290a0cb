"""The lab's Receptor mesh: the controller's Receptor on the lab host, execution nodes as lab nodes.

With an `execution:` section, `lab up` stands in for the site's machines:

- the **controller's Receptor** runs on the lab host (a daemon like the apt proxy), listening on
  `<host>:27199` on the lab bridge for execution nodes, with its control service (the socket
  `skyrack join --via receptor` talks to) in the lab's state directory;
- the mesh is **mutual TLS**: a CA of the lab's own (issued once, kept 0600 in its state
  directory) signs the controller's certificate (its address, node ID `controller`) and each
  execution node's (its node ID as Receptor reads it: an other name in subjectAltName); the
  listener requires a client certificate from that CA, so only the lab's nodes join;
- each **execution node** is a lab node booted with the user-data skyrack renders for one
  (`render.cloud_init.execution_node`): its own Receptor, dialling the controller, runs
  `ansible-runner worker` for its racks' runs, and its runs reach the racks over SSH from its
  own address, with host keys checked.

What a production execution node installs, the lab mounts read-only from this host at the same
paths, so the node runs the controller's own versions (docs/join.md): the receptor binary the
build cache holds, this Python environment (ansible-core, ansible-runner) and the lab's SSH
material (the key, known_hosts and the ssh_config the inventory names).
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import yaml

from .. import daemon, pki
from .. import plan as planmod
from ..errors import InputError, Problem
from ..files import write_private
from ..render import cloud_init
from .state import Host, Paths

PORT = 27199  # the controller's Receptor listener on the lab bridge
MARKER = "skyrack-lab-receptor"  # in its config file's name, so its PID is never mistaken
CONTROLLER_ID = "controller"
ROLE = "execution"
RECEPTOR_ON_NODE = "/usr/local/bin/receptor"


class MeshError(RuntimeError):
    """The controller's Receptor did not start."""


def socket_path(paths: Paths) -> Path:
    return paths.root / "receptor" / "control.sock"


def data_dir(paths: Paths) -> Path:
    """The controller's work units (payloads hold the join's bootstrap token): on a memory filesystem."""
    return Path("/dev/shm") / f"skyrack-lab-{paths.root.name}-receptor"  # noqa: S108 - made 0700 before use


def controller_address(host_ip: str) -> str:
    return f"{host_ip}:{PORT}"


def check(p: planmod.Plan, paths: Paths, host_ip: str) -> list[Problem]:
    """The `execution:` section must name what the lab runs (like mirrors.apt_proxy)."""
    ex = p.env.execution
    if ex is None:
        return []
    src = str(p.source)
    problems = []
    if ex.receptor_socket != str(socket_path(paths)):
        problems.append(Problem(src, "execution.receptor_socket",
                                f"the lab's Receptor control socket is {socket_path(paths)}; set that"))
    if ex.controller != controller_address(host_ip):
        problems.append(Problem(src, "execution.controller",
                                f"the lab's Receptor listens on {controller_address(host_ip)}; set that"))
    return problems


def hosts(p: planmod.Plan) -> list[Host]:
    """Execution nodes, addressed from the top of the first on-prem range down (racks start low)."""
    ex = p.env.execution
    if ex is None:
        return []
    top = ipaddress.IPv4Network(p.env.onprem.cidrs[0]).broadcast_address
    taken = {n.ip: n.name for n in p.nodes}
    out = []
    for i, x in enumerate(ex.nodes):
        ip = str(top - 1 - i)
        if ip in taken:
            raise InputError([Problem(str(p.source), f"execution.nodes[{i}]",
                                      f"the lab puts execution node {x.name} at {ip} (the top of onprem.cidrs[0]), "
                                      f"which rack node {taken[ip]} has; move that rack's nodes lower")])
        out.append(Host(x.name, ip, ROLE))
    return out


def ensure_pki(p: planmod.Plan, paths: Paths, host_ip: str) -> dict[str, pki.Issued]:
    """The mesh's CA and a certificate per Receptor node (`ca`, `controller`, each execution node):
    issued on first use, kept 0600 in the lab's state directory, issued again for a node added later."""
    d = paths.root / "receptor"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    store = d / "pki.json"
    issued = {k: pki.Issued(**v) for k, v in json.loads(store.read_text()).items()} if store.exists() else {}
    if "ca" not in issued:
        issued["ca"] = pki.create_ca(f"skyrack {p.env.name} Receptor mesh CA")
    if "work-signing" not in issued:  # the controller signs work, the nodes verify it
        issued["work-signing"] = pki.keypair("rsa")
    ca = issued["ca"]
    wanted = [(CONTROLLER_ID, [host_ip])] + [(x.name, []) for x in (p.env.execution.nodes if p.env.execution else [])]
    for node, ips in wanted:
        if node not in issued:
            issued[node] = pki.issue(ca, node, dns_names=[node], ips=ips, server=True, client=True,
                                     other_names=[(cloud_init.RECEPTOR_NODE_ID_OID, node)])
    write_private(store, json.dumps({k: asdict(v) for k, v in issued.items()}, indent=1))
    return issued


def user_data(p: planmod.Plan, paths: Paths, host_ip: str) -> dict[str, str]:
    ex = p.env.execution
    if ex is None:
        return {}
    issued = ensure_pki(p, paths, host_ip)
    runner_dir = str(Path(sys.executable).parent)
    return {x.name: cloud_init.execution_node(p, x, tls(issued, x.name), receptor=RECEPTOR_ON_NODE, runner_dir=runner_dir)
            for x in ex.nodes}


def tls(issued: dict[str, pki.Issued], node: str) -> cloud_init.MeshTls:
    """What execution node `node` gets of the mesh's PKI (ensure_pki)."""
    return cloud_init.MeshTls(issued["ca"].cert_pem, issued[node].cert_pem, issued[node].key_pem,
                              issued["work-signing"].cert_pem)


def binds(paths: Paths, receptor: Path) -> list[str]:
    """systemd-nspawn flags: what an execution node gets from this host, read-only, at the same paths."""
    prefixes = dict.fromkeys([sys.prefix, sys.base_prefix])  # this environment and the Python it is made from
    return [f"--bind-ro={receptor}:{RECEPTOR_ON_NODE}", *(f"--bind-ro={d}" for d in prefixes),
            f"--bind-ro={paths.ssh_dir}"]


def alive(pid: int | None) -> bool:
    return daemon.alive(pid, MARKER)


def start_controller(p: planmod.Plan, paths: Paths, host_ip: str, receptor: Path) -> int:
    issued = ensure_pki(p, paths, host_ip)
    d = paths.root / "receptor"
    tls = d / "tls"
    tls.mkdir(mode=0o700, exist_ok=True)
    for name, text in (("ca.crt", issued["ca"].cert_pem), ("controller.crt", issued[CONTROLLER_ID].cert_pem),
                       ("controller.key", issued[CONTROLLER_ID].key_pem),
                       ("work-signing.key", issued["work-signing"].key_pem)):
        write_private(tls / name, text)
    config = d / f"{MARKER}.yaml"
    data = data_dir(paths)
    data.mkdir(mode=0o700, exist_ok=True)
    data.chmod(0o700)
    config.write_text(yaml.safe_dump([
        {"node": {"id": CONTROLLER_ID, "datadir": str(data)}},
        {"log-level": "info"},
        # only nodes with a certificate of the mesh's CA connect (Receptor 1.4 does not check their node ID here)
        {"tls-server": {"name": cloud_init.RECEPTOR_TLS, "cert": str(tls / "controller.crt"),
                        "key": str(tls / "controller.key"), "requireclientcert": True, "clientcas": str(tls / "ca.crt")}},
        # work goes to an execution node over TLS, which checks that the node's certificate names it
        {"tls-client": {"name": cloud_init.RECEPTOR_TLS, "rootcas": str(tls / "ca.crt"),
                        "cert": str(tls / "controller.crt"), "key": str(tls / "controller.key")}},
        {"control-service": {"service": "control", "filename": str(socket_path(paths))}},
        {"tcp-listener": {"port": PORT, "bindaddr": host_ip, "tls": cloud_init.RECEPTOR_TLS}},
        # work submitted here with signwork is signed (a JWT, RS256); execution nodes run only that
        {"work-signing": {"privatekey": str(tls / "work-signing.key"), "tokenexpiration": "30m"}},
    ], sort_keys=False))
    return daemon.start([str(receptor), "--config", str(config)], name="the lab's Receptor",
                        listen=(host_ip, PORT), log=paths.log_dir / "receptor.log", timeout=30, error=MeshError)


def stop_controller(pid: int | None, paths: Paths | None = None) -> bool:
    """Stop the controller's Receptor; with `paths`, forget its work units too."""
    stopped = daemon.stop(pid, MARKER)
    if paths is not None:
        shutil.rmtree(data_dir(paths), ignore_errors=True)
    return stopped
