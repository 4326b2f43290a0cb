"""`lab up`, `status` and `down`: bring the hosts of a lab environment to life and back to nothing.

`up` converges: whatever already runs and matches the environment is kept, missing or
crashed parts (bridge, rules, proxy, nodes) are (re)made, hosts no longer in the file
are removed. So `up` twice is a no-op and `up` after a crash recovers.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import azurite, build, daemon, upstream
from .. import plan as planmod
from ..config.schema import BRIDGE_PATTERN
from ..errors import InputError, Problem
from ..render import cloud_init
from . import balancer, cluster, controlplane, hostlimits, image, mesh, network, nodes, site, ssh
from .state import STATE_ROOT, Host, LabState, Paths, load, save

TOOLS = ("systemd-nspawn", "debootstrap", "iptables", "ssh", "ssh-keygen", "ip")
KUBERNETES_TOOLS = ("go", "umoci", "skopeo", "docker-registry", "dpkg-deb", "apt-ftparchive", "gpg", "cc", "setcap",
                    "haproxy")
# Boot order: etcd before the API servers (kubeadm init needs it), the API servers before the workers;
# execution nodes (mesh.py) with the workers.
STAGES = (("etcd", "etcd-events"), ("apiserver",), ("worker", mesh.ROLE))
APISERVER_TIMEOUT = 900  # cloud-init installs Kubernetes and runs kubeadm init
Say = Callable[[str], None]
KWOK_MARKER = "skyrack-fleet-kwok.yaml"  # in KWOK's command line (its configuration file): skyrack.lab.fleet


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
    def site(self) -> site.Site:
        return site.Site(str(self.cfg.host_ip))

    @property
    def proxy_url(self) -> str:
        return self.site.proxy

    @property
    def kubernetes(self) -> upstream.KubernetesBuild | None:
        """The Kubernetes this lab builds and runs: only when the environment names a Kubernetes mirror."""
        if self.plan.env.mirrors.kubernetes is None:
            return None
        return upstream.KUBERNETES_BUILDS[self.plan.env.kubernetes.version]

    def hosts(self) -> list[Host]:
        return ([Host(m.name, m.ip, m.role) for m in self.plan.members]
                + [Host(n.name, n.ip, "worker") for n in self.plan.nodes] + mesh.hosts(self.plan))


def open_lab(env_path: Path) -> Lab:
    """Plan a lab environment; InputError if it is not one, or its mirrors or their CA disagree with the lab's."""
    with contextlib.suppress(OSError):  # not root: the file names the CA, and loading says it is missing
        site.ensure_ca()
    p = planmod.make(env_path)
    if p.env.lab is None:
        raise InputError([Problem(str(env_path), "lab", "not a lab environment (no `lab:` section); "
                                                        "the lab runs only environments made for this machine")])
    lab = Lab(p, Paths.for_bridge(p.env.lab.bridge))
    problems = []
    if p.env.mirrors.ca is None or p.env.mirrors.ca != site.lab_ca():
        problems.append(Problem(str(env_path), "mirrors.ca", f"the lab's mirrors serve HTTPS with the lab's site CA: "
                                                             f"set `ca: {site.SITE_CA}`"))
    if p.env.mirrors.apt_proxy not in (None, lab.proxy_url):
        problems.append(Problem(str(env_path), "mirrors.apt_proxy",
                                f"the lab's apt proxy listens on {lab.proxy_url}; set that or leave it out"))
    if p.env.mirrors.kubernetes is not None:  # validate() made sure the version is one the lab builds
        b = upstream.KUBERNETES_BUILDS[p.env.kubernetes.version]
        for fld, url in site.expected_mirrors(lab.site, b).items():
            if fld != "apt_proxy" and getattr(p.env.mirrors, fld) != url:
                problems.append(Problem(str(env_path), f"mirrors.{fld}",
                                        f"the lab serves {'its Kubernetes repository' if fld == 'kubernetes' else 'its registry'}"
                                        f" at {url}; set that"))
    elif p.env.mirrors.registry is not None:
        problems.append(Problem(str(env_path), "mirrors.registry", "the lab fills its registry only when it builds "
                                                                   "Kubernetes: set mirrors.kubernetes too"))
    problems += mesh.check(p, lab.paths, str(p.env.lab.host_ip))
    if problems:
        raise InputError(problems)
    return lab


def check_host(kubernetes: bool = False, kubelets: bool | None = None, booting: Collection[str] = ()) -> None:
    """Root and the tools the lab (and, with `kubernetes`, its build) needs; the disk where kubelets will run
    (`kubelets`, by default wherever Kubernetes is), with room for hosts that have no disk yet (their roles:
    `booting`)."""
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, mounts, iptables); run it as root")
    missing = [t for t in TOOLS + (KUBERNETES_TOOLS if kubernetes else ()) if shutil.which(t) is None]
    if missing:
        raise LabError(f"missing on this host: {', '.join(missing)}; `./dev setup` installs them")
    if kubernetes if kubelets is None else kubelets:
        check_disk(STATE_ROOT, host_bytes(booting), len(booting))


# kubelet's hard eviction threshold for the image filesystem (imagefs.available<15%, skyrack.tuning), plus a
# margin. The lab's nodes keep their images and containers on this host's disk, so below it every kubelet
# reports DiskPressure and evicts pods.
MIN_FREE_SHARE = 0.16
# What one new host writes to that disk (its packages, images, containers, logs), with room to grow: measured
# on the lab of configs/lab.yaml in a test run (docs/lab.md, "Disk": an API server 1.3 GiB, a worker up to
# 1.0 GiB, an etcd member 0.3 GiB, an execution node 11 MiB).
KUBELET_HOST_BYTES = 2 * 2**30
HOST_BYTES = 2**29  # an etcd member, an execution node


def host_bytes(roles: Collection[str]) -> int:
    """What booting hosts of these roles will write to the lab's disk."""
    return sum(KUBELET_HOST_BYTES if r in ("apiserver", "worker") else HOST_BYTES for r in roles)


def check_disk(path: Path, need: int = 0, booting: int = 0) -> None:
    """Refuse to boot `booting` new hosts that will write `need` bytes when that would leave less than
    MIN_FREE_SHARE of the disk free. A host that already has its disk (a node restarted) needs no new room,
    only the threshold: a test that stops a node and starts it again is not refused for what the lab holds."""
    path.mkdir(parents=True, exist_ok=True)
    st = os.statvfs(path)
    if not st.f_blocks:
        return
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    if free - need < MIN_FREE_SHARE * total:
        gib = 2**30
        adding = f"; {booting} new host(s) write about {need / gib:.0f} GiB" if booting else ""
        raise LabError(f"{path}: {free / gib:.0f} GiB ({free / total:.0%}) of its filesystem is free{adding}, and "
                       f"the lab's kubelets share this disk and evict pods below 15% free (kubelet's "
                       f"imagefs.available): free at least {(MIN_FREE_SHARE * total + need - free) / gib:.0f} GiB "
                       f"first (the Go build cache is often the largest: GOCACHE=/var/cache/skyrack/go/build "
                       f"go clean -cache)")


def up(env_path: Path, user_data: Mapping[str, str] | None = None, say: Say = print,
       timeout: float = 120, roles: Collection[str] | None = None) -> LabState:
    """Start every host of the environment (see the module docstring); with `roles`, only the hosts of those
    roles (`skyrack etcd lab-up`: the etcd members), leaving the others as they are.

    Control-plane members boot with the user-data their Azure VMs get (`controlplane.user_data`);
    `user_data` overrides it per host (`lab up --seed-dir`). A node that already booted with other
    user-data is re-seeded and rebooted, so cloud-init runs the new one. With `mirrors.kubernetes`
    set, Kubernetes is built (once, cached) and served from the lab's mirrors first, the cluster
    layer is applied once the API servers answer, and the join's outputs file is written."""
    lab = open_lab(env_path)
    unknown = sorted(set(user_data or {}) - {h.name for h in lab.hosts()})
    if unknown:
        raise InputError([Problem(str(env_path), "", f"cloud-init user-data for hosts not in this lab: "
                                                     f"{', '.join(unknown)}")])
    cfg, paths = lab.cfg, lab.paths
    before = load(paths)
    new = [h for h in lab.hosts() if (roles is None or h.role in roles) and not (before and h.name in before.hosts)]
    # the kubelets' disk: only where kubelets boot (not `etcd lab-up`'s members)
    check_host(kubernetes=lab.kubernetes is not None,
               kubelets=lab.kubernetes is not None and (roles is None or bool({"apiserver", "worker"} & set(roles))),
               booting=[h.role for h in new])
    st = before or LabState(env=lab.plan.env.name, source=str(env_path.resolve()), bridge=cfg.bridge,
                                 subnet=str(cfg.subnet), host_ip=str(cfg.host_ip))
    st.env, st.source = lab.plan.env.name, str(env_path.resolve())
    paths.log_dir.mkdir(parents=True, exist_ok=True)
    artifacts = _build(lab, say)
    img = image.ensure(cfg.suite, paths.log_dir / "image.log", say)
    st.image = str(img.rootfs)
    network.ensure_bridge(cfg.bridge, str(cfg.host_ip), str(cfg.subnet),
                          also=(lab.plan.apiserver_lb_ip,) if lab.kubernetes is not None else ())
    st.rules = network.ensure_rules(cfg.bridge, str(cfg.subnet))
    _start_site(lab, st, artifacts, say)
    if lab.kubernetes is not None:
        _start_balancer(lab, st, say)
    receptor = _start_mesh(lab, st, say)
    if controlplane.backups_configured(lab.plan) and not azurite.alive(st.azurite_pid):
        st.azurite_pid = controlplane.start_azurite(lab.plan, paths, say)
    save(paths, st)

    wanted = {h.name: h for h in lab.hosts() if roles is None or h.role in roles}
    for name in [n for n in st.hosts if n not in {h.name for h in lab.hosts()}]:
        say(f"removing {name} (no longer in {env_path})")
        nodes.stop(paths, st.hosts[name], cfg.bridge)
        nodes.remove(paths, name)
        del st.hosts[name]
    seeds = {**controlplane.user_data(lab.plan, controlplane.ensure_pki(lab.plan, paths), lab.plan.env.mirrors.kubernetes),
             **mesh.user_data(lab.plan, paths, str(cfg.host_ip)), **(user_data or {})}
    pub = ssh.ensure_key(paths)
    booting = [h.role for h in wanted.values()
               if not (h.name in st.hosts and nodes.alive(st.hosts[h.name], cfg.bridge))]
    warning = hostlimits.inotify_warning(booting)
    if warning:
        say(f"warning: {warning}")
    for roles in STAGES:
        stage = [h for h in wanted.values() if h.role in roles]
        started = [h for h in stage if _boot(lab, st, img.rootfs, h, seeds.get(h.name), pub,
                                             mesh.binds(paths, receptor) if receptor and h.role == mesh.ROLE else [])]
        ssh.write(paths, list(st.hosts.values()),
                  {n: nodes.host_keys(nodes.merged(paths, n)) for n in st.hosts})
        save(paths, st)
        if started:
            say(f"booting {len(started)} node(s): {', '.join(h.name for h in started)}")
            wait_ready(lab, started, APISERVER_TIMEOUT if "apiserver" in roles else timeout,
                       rerun=lab.kubernetes is not None)
        if "apiserver" in roles and artifacts is not None and stage:
            for h in stage:
                rerun_bootstrap(lab, h, say)
            cluster.converge(lab.plan, env_path, paths, artifacts, say)
    save(paths, st)
    return st


def replace(env_path: Path, name: str, say: Say = print) -> None:
    """The lab's `pulumi up --replace` of one API server (docs/azure.md: a member is rolled by replacing it): its
    node is stopped and its disk removed, and a new one boots with the environment's current user-data (a new
    Kubernetes version: `kubeadm init` of that version against the cluster's etcd), then this member must answer
    /readyz and the control plane be healthy before it returns. Every other host is left as it is. The site's
    mirrors first serve the current build (and keep serving the ones before: the other nodes still use theirs)."""
    lab = open_lab(env_path)
    members = [m.name for m in lab.plan.members_of("apiserver")]
    if name not in members:
        raise InputError([Problem(str(env_path), "control_plane.apiservers",
                                  f"{name!r} is not an API server of this lab (API servers: {', '.join(members)}); "
                                  "etcd members keep their data and are not replaced by an upgrade")])
    st = load(lab.paths)
    if st is None or name not in st.hosts:
        raise InputError([Problem(str(env_path), "lab", f"the lab is not up: run `skyrack lab up {env_path}` first")])
    # the new disk takes the place of the old one, removed first: the threshold alone
    check_host(kubernetes=lab.kubernetes is not None, kubelets=lab.kubernetes is not None)
    arts = _build(lab, say)
    img = image.ensure(lab.cfg.suite, lab.paths.log_dir / "image.log", say)
    _start_site(lab, st, arts, say)
    seeds = controlplane.user_data(lab.plan, controlplane.ensure_pki(lab.plan, lab.paths), lab.plan.env.mirrors.kubernetes)
    say(f"replacing {name}: stopped, its disk removed, booted with the current user-data")
    nodes.stop(lab.paths, st.hosts[name], lab.cfg.bridge)
    nodes.remove(lab.paths, name)
    del st.hosts[name]
    save(lab.paths, st)
    want = next(h for h in lab.hosts() if h.name == name)
    _boot(lab, st, img.rootfs, want, seeds.get(name), ssh.ensure_key(lab.paths), [])
    ssh.write(lab.paths, list(st.hosts.values()), {n: nodes.host_keys(nodes.merged(lab.paths, n)) for n in st.hosts})
    save(lab.paths, st)
    wait_ready(lab, [want], APISERVER_TIMEOUT, rerun=lab.kubernetes is not None)
    if arts is not None:
        rerun_bootstrap(lab, want, say)
        member = next(m for m in lab.plan.members_of("apiserver") if m.name == name)
        cluster.member_ready(lab.plan, lab.paths, member.ip)
        cluster.converge(lab.plan, env_path, lab.paths, arts, say)
    say(f"{name} replaced")


def _build(lab: Lab, say: Say, kubernetes_provider: bool = False) -> build.Artifacts | None:
    """What the lab serves and runs. Its own stand-in stack makes no Kubernetes resource: the Pulumi engine
    without the Kubernetes provider unless asked (the cluster layer's `skyrack lab pulumi` asks)."""
    if lab.kubernetes is None:
        return None
    try:
        return build.ensure(lab.kubernetes, lab.cfg.suite, say, kubernetes_provider=kubernetes_provider)
    except build.BuildError as exc:
        raise LabError(str(exc)) from None


def artifacts(lab: Lab, *, kubernetes_provider: bool = False, say: Say | None = None) -> build.Artifacts:
    """The lab's built Kubernetes (from the cache after the first `lab up`); LabError without one. With
    `kubernetes_provider`, an engine that runs the cluster layer (built on first use, progress to `say`)."""
    if lab.kubernetes is None:
        raise LabError(f"{lab.plan.source}: this lab runs no Kubernetes (mirrors.kubernetes is not set)")
    found = _build(lab, say or (lambda _m: None), kubernetes_provider)
    assert found is not None
    return found


def _start_site(lab: Lab, st: LabState, artifacts: build.Artifacts | None, say: Say) -> None:
    """The site's mirrors on the lab host: the apt proxy (and the Kubernetes repository), the registry."""
    # the current build's repository, and the ones served before (a node not yet upgraded still reads its own,
    # as a real site's mirror keeps every minor)
    served = {} if artifacts is None else {
        **{k: Path(v) for k, v in (st.proxy_serves or {}).items() if Path(v).is_dir()},
        build.debs.repo_path(artifacts.build): artifacts.apt_repo}
    if st.proxy_pid and site.proxy_alive(st.proxy_pid) and st.proxy_serves != {k: str(v) for k, v in served.items()}:
        daemon.stop(st.proxy_pid, site.PROXY_MARKER)  # serving another build: restart it
    try:
        if not site.proxy_alive(st.proxy_pid):
            st.proxy_pid = site.start_proxy(lab.paths, lab.site, served)
            st.proxy_serves = {k: str(v) for k, v in served.items()}
            say(f"apt proxy on {lab.proxy_url} (pid {st.proxy_pid})"
                + (f", serving {lab.plan.env.mirrors.kubernetes}" if served else ""))
        if artifacts is not None:
            if not site.registry_alive(st.registry_pid):
                st.registry_pid = site.start_registry(lab.paths, lab.site)
                say(f"registry on {lab.site.registry} (pid {st.registry_pid})")
            pushed = site.fill_registry(lab.paths, lab.site, artifacts)
            say(f"registry holds {len(pushed)} images ({', '.join(r.rsplit('/', 1)[1] for r in pushed)})")
    except site.SiteError as exc:
        raise LabError(str(exc)) from None


def _start_balancer(lab: Lab, st: LabState, say: Say) -> None:
    """The API servers' load balancer on the lab host (balancer.py), restarted when what it balances changed."""
    ca_pem = controlplane.ensure_pki(lab.plan, lab.paths).cas["kubernetes"].cert_pem
    wanted = balancer.fingerprint(lab.plan, lab.paths, ca_pem)
    if balancer.alive(st.balancer_pid) and st.balancer_config == wanted:
        return
    balancer.stop(st.balancer_pid)
    try:
        st.balancer_pid = balancer.start(lab.plan, lab.paths, ca_pem)
    except balancer.BalancerError as exc:
        raise LabError(str(exc)) from None
    st.balancer_config = wanted
    members = lab.plan.members_of("apiserver")
    say(f"load balancer on {lab.plan.apiserver_endpoint} (haproxy, pid {st.balancer_pid}) for "
        f"{', '.join(m.name for m in members)}, each probed on /readyz")


def _start_mesh(lab: Lab, st: LabState, say: Say) -> Path | None:
    """With an `execution:` section: the controller's Receptor (mesh.py); the receptor binary it runs."""
    if lab.plan.env.execution is None:
        return None
    from ..build import receptor as receptor_build

    try:
        binary = receptor_build.binary(say)
        if not mesh.alive(st.receptor_pid):
            st.receptor_pid = mesh.start_controller(lab.plan, lab.paths, str(lab.cfg.host_ip), binary)
            say(f"Receptor on {mesh.controller_address(str(lab.cfg.host_ip))} (pid {st.receptor_pid}), "
                f"control socket {mesh.socket_path(lab.paths)}")
    except (build.BuildError, mesh.MeshError) as exc:
        raise LabError(str(exc)) from None
    return binary


def _seed_id(user_data: str | None) -> str:
    return hashlib.sha256((user_data or nodes.EMPTY_USER_DATA).encode()).hexdigest()[:12]


def _boot(lab: Lab, st: LabState, rootfs: Path, want: Host, user_data: str | None, pub: str,
          binds: list[str]) -> bool:
    """Make sure host `want` runs with `user_data`; True if it was (re)started."""
    paths, cfg = lab.paths, lab.cfg
    host = st.hosts.get(want.name)
    seed_file = paths.node_dir(want.name) / "seed-id"
    seed_id = _seed_id(user_data)
    reseed = seed_file.exists() and seed_file.read_text() != seed_id
    if host is not None and nodes.alive(host, cfg.bridge) and not reseed:
        return False
    if host is not None:  # crashed, stopped, or booted with other user-data: clear what is left before booting
        nodes.stop(paths, host, cfg.bridge)
    host = Host(want.name, want.ip, want.role)
    root = nodes.mount(paths, want.name, rootfs)
    stamp = paths.node_dir(want.name) / "personalised"
    if not stamp.exists():
        prefix = ipaddress.IPv4Network(cfg.subnet).prefixlen
        nodes.personalise(root, host, str(cfg.host_ip), prefix, lab.proxy_url, pub, user_data, seed_id)
        stamp.touch()
    elif reseed:
        nodes.seed(root, want.name, user_data, seed_id)
    nodes.write_routes(root, network.fabric_routes(lab.plan, want.name))
    seed_file.write_text(seed_id)
    host.pid = nodes.start(paths, host, cfg.bridge, binds)
    st.hosts[want.name] = host
    save(paths, st)
    return True


BOOTSTRAP = "/usr/local/sbin/skyrack-kubeadm"  # the API servers' bootstrap (render/cloud_init.py)
BOOTSTRAP_DONE = "/var/lib/skyrack/kubeadm-init.done"


def rerun_bootstrap(lab: Lab, host: Host, say: Say) -> None:
    """An API server whose first boot did not finish `kubeadm init` gets its bootstrap run again:
    the documented repair of a failed first boot (docs/azure.md), here over the lab's SSH."""
    if ssh.run(lab.paths, host.name, f"test -e {BOOTSTRAP_DONE}", timeout=30).returncode == 0:
        return
    log = lab.paths.log_dir / f"{host.name}-bootstrap.log"
    say(f"{host.name}: its bootstrap did not finish; running {BOOTSTRAP} again (log {log})")
    r = ssh.run(lab.paths, host.name, f"{BOOTSTRAP} 2>&1", timeout=APISERVER_TIMEOUT)
    log.write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        tail = " / ".join(r.stdout.strip().splitlines()[-3:])
        raise LabError(f"{host.name}: {BOOTSTRAP} failed (exit {r.returncode}): {tail}; full log {log}")


def wait_ready(lab: Lab, hosts: list[Host], timeout: float, rerun: bool = False) -> None:
    """Wait for SSH (with the host key checked) and for cloud-init to finish on each host.
    `rerun`: an API server whose cloud-init failed is not an error yet (its bootstrap runs again)."""
    deadline = time.monotonic() + timeout

    def boot_log(h: Host) -> str:
        """The last line of the host's first-boot log (render/cloud_init: retry.sh.j2), as production's shows."""
        r = ssh.run(lab.paths, h.name, f"tail -n 1 {cloud_init.BOOT_LOG} 2>/dev/null", timeout=10)
        last = r.stdout.strip() if r.returncode == 0 else ""
        return f"; its {cloud_init.BOOT_LOG} says: {last}" if last else ""

    def ready(h: Host) -> str | None:
        if not nodes.wait_ssh(h.ip, deadline):
            return f"{h.name}: SSH did not answer within {timeout:.0f} s (log: {lab.paths.log_dir / h.name}.log)"
        while time.monotonic() < deadline:
            r = ssh.run(lab.paths, h.name, "cat /run/cloud-init/result.json 2>/dev/null", timeout=10)
            if r.returncode == 0 and r.stdout.strip():
                errors = json.loads(r.stdout).get("v1", {}).get("errors", [])
                if errors and rerun and h.role == "apiserver":
                    return None
                return f"{h.name}: cloud-init finished with errors: {errors}{boot_log(h)}" if errors else None
            if r.returncode == 255:  # ssh itself failed, e.g. a host key mismatch: do not retry blindly
                if "Host key verification failed" in r.stderr:
                    return f"{h.name}: {r.stderr.strip()}"
            time.sleep(0.5)
        return f"{h.name}: cloud-init did not finish within {timeout:.0f} s{boot_log(h)}"

    with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
        problems = [p for p in pool.map(ready, hosts) if p]
    if problems:
        raise LabError("; ".join(problems))


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
    return teardown(lab.paths, lab.cfg.bridge, str(lab.cfg.subnet), say)


def down_bridge(bridge: str, say: Say = print) -> list[str]:
    """`down` from what the lab recorded, for a lab whose environment file is gone (a test's temporary
    file, a deleted checkout): its state names the bridge, subnet, nodes and daemons."""
    if not re.fullmatch(BRIDGE_PATTERN, bridge):
        raise LabError(f"--bridge: {bridge!r} is not a lab bridge name (lab.bridge: {BRIDGE_PATTERN})")
    check_host()
    paths = Paths.for_bridge(bridge)
    st = load(paths)
    if st is None:
        raise LabError(f"no lab is recorded on bridge {bridge} ({paths.state} does not exist); "
                       "`skyrack lab list` shows the labs on this machine")
    return teardown(paths, bridge, st.subnet, say)


def teardown(paths: Paths, bridge: str, subnet: str, say: Say = print) -> list[str]:
    st = load(paths)
    done: list[str] = []
    if st is not None:
        hosts = list(st.hosts.values())
        with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
            list(pool.map(lambda h: nodes.stop(paths, h, bridge), hosts))
        done += [f"stopped {h.name}" for h in hosts]
        if daemon.stop(st.proxy_pid, site.PROXY_MARKER):
            done.append(f"stopped the apt proxy (pid {st.proxy_pid})")
        if daemon.stop(st.registry_pid, site.REGISTRY_MARKER):
            done.append(f"stopped the registry (pid {st.registry_pid})")
        if daemon.stop(st.azurite_pid, azurite.MARKER):
            done.append(f"stopped Azurite (pid {st.azurite_pid})")
        if balancer.stop(st.balancer_pid):
            done.append(f"stopped the load balancer (pid {st.balancer_pid})")
        if daemon.stop(st.kwok_pid, KWOK_MARKER):
            done.append(f"stopped KWOK (pid {st.kwok_pid})")
        if mesh.stop_controller(st.receptor_pid, paths):
            done.append(f"stopped the lab's Receptor (pid {st.receptor_pid})")
    node_root = paths.root / "nodes"
    if node_root.is_dir():
        for d in node_root.iterdir():
            nodes.remove(paths, d.name)
    network.remove_rules(network.forward_rules(bridge, subnet))
    if network.bridge_exists(bridge):
        network.remove_bridge(bridge)
        done.append(f"removed bridge {bridge}")
    shutil.rmtree(paths.root, ignore_errors=True)
    shutil.rmtree(mesh.data_dir(paths), ignore_errors=True)
    for line in done:
        say(line)
    return done


def labs(root: Path = STATE_ROOT) -> list[dict]:
    """Every lab recorded on this machine (one per bridge), whichever environment file made it: its bridge,
    environment file (and whether it still exists), state directory and running nodes."""
    out = []
    for state in sorted(root.glob("*/state.json")):
        paths = Paths(state.parent)
        try:
            st = load(paths)
        except (OSError, ValueError, TypeError):
            out.append({"bridge": state.parent.name, "environment": None, "source": None, "source_exists": False,
                        "state_dir": str(paths.root), "nodes": 0, "running": 0, "readable": False})
            continue
        assert st is not None
        src = Path(st.source) if st.source else None
        out.append({"bridge": st.bridge, "environment": st.env, "source": str(src) if src else None,
                    "source_exists": bool(src and src.is_file()), "state_dir": str(paths.root),
                    "nodes": len(st.hosts), "running": sum(nodes.alive(h, st.bridge) for h in st.hosts.values()),
                    "readable": True})
    return out


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
        "apt_proxy": lab.proxy_url if st and site.proxy_alive(st.proxy_pid) else None,
        "registry": lab.site.registry if st and site.registry_alive(st.registry_pid) else None,
        # the API servers' endpoint, served by the lab's load balancer (balancer.py)
        "load_balancer": lab.plan.apiserver_endpoint if st and balancer.alive(st.balancer_pid) else None,
        "mesh": lab.plan.env.execution is not None,  # the lab runs a Receptor mesh (its `execution:`)
        "receptor": str(mesh.socket_path(lab.paths)) if st and mesh.alive(st.receptor_pid) else None,
        "kubernetes": lab.plan.env.kubernetes.version if lab.kubernetes else None,
        "builds": build.report(),
        "ssh_config": str(lab.paths.ssh_config) if st else None,
        "inotify": {"in_use": hostlimits.in_use(), "limit": hostlimits.limit()},  # root's, shared by every lab
        "hosts": hosts,
    }
