"""One lab node: an overlay on the base image, its own identity, booted by systemd-nspawn.

A node's disk is an overlay (the shared image below, the node's own `upper/` above), so
it survives a stop and start like a real disk; `remove` deletes it. Identity the image
must not share (SSH host keys, machine-id, hostname, resolv.conf) is written into the
overlay before the first boot, with the static address of `host0` and the NoCloud seed
cloud-init reads at boot. `/data` is a bind mount: the node's local data disk; so is
`/var/lib/containerd` (overlayfs cannot stack containerd's snapshots on the node's overlay).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .state import Host, Paths

CGROUP_FS = Path("/sys/fs/cgroup")
EMPTY_USER_DATA = "#cloud-config\n{}\n"
# What a node needs to run containers itself (kubelet, containerd, runc): see ../shared/lab-notes.md.
CONTAINER_HOST_FLAGS = (
    # `passive` leaves the console pty unread: a slow boot job then blocks PID 1 on its status line
    "--console=read-only",
    "--system-call-filter=@keyring",  # runc creates a session keyring; nspawn's filter blocks keyctl
    "--bind=/dev/kmsg", "--capability=CAP_SYSLOG",  # kubelet's OOM watcher reads the kernel log
)


def merged(paths: Paths, name: str) -> Path:
    return paths.node_dir(name) / "rootfs"


def is_mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def mount(paths: Paths, name: str, image_rootfs: Path) -> Path:
    d = paths.node_dir(name)
    for sub in ("upper", "work", "rootfs", "data", "containerd"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    target = merged(paths, name)
    if not is_mounted(target):
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={image_rootfs},upperdir={d / 'upper'},workdir={d / 'work'}", str(target)],
                       check=True, capture_output=True, text=True)
    return target


def unmount(paths: Paths, name: str, timeout: float = 15, say: Callable[[str], None] | None = None) -> None:
    """Unmount a node's root. A process just killed in it can hold a file for a moment after its cgroup is empty
    (umount: "target is busy"): tried again until `timeout`, then detached (`umount --lazy`: the kernel frees
    it when the last holder is gone), so a teardown never stops halfway with a node's disk left mounted."""
    target = merged(paths, name)
    deadline = time.monotonic() + timeout
    while is_mounted(target):
        proc = subprocess.run(["umount", str(target)], capture_output=True, text=True)
        if proc.returncode == 0:
            return
        if time.monotonic() >= deadline:
            (say or print)(f"{name}: its root still busy after {timeout:.0f} s ({proc.stderr.strip()}): detached")
            subprocess.run(["umount", "--lazy", str(target)], check=True, capture_output=True)
            return
        time.sleep(0.5)


def personalise(root: Path, host: Host, host_ip: str, prefix: int, apt_proxy: str, authorized_key: str,
                user_data: str | None, seed_id: str = "0") -> None:
    """Write the node's identity and boot-time configuration (first boot only)."""
    etc = root / "etc"
    subprocess.run(["ssh-keygen", "-A", "-f", str(root)], check=True, capture_output=True)
    if not (etc / "hostname").exists():  # cloud-init keeps a hostname it did not write
        (etc / "hostname").write_text(host.name + "\n")
    (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {host.name}\n")
    machine_id = subprocess.run(["systemd-id128", "new"], check=True, capture_output=True, text=True).stdout
    (etc / "machine-id").write_text(machine_id)
    # The site's resolver would be here; the lab host runs none (nothing listens on its port 53), so a
    # name outside the cluster fails at once. The host's own resolver is never given to a node.
    (etc / "resolv.conf").write_text(f"# skyrack lab: the lab host; it serves no DNS (air-gapped)\nnameserver {host_ip}\n")
    (etc / "systemd/network").mkdir(parents=True, exist_ok=True)
    # Same name as systemd's own DHCP default for containers, which this replaces.
    (etc / "systemd/network/80-container-host0.network").write_text(
        f"[Match]\nName=host0\n\n[Network]\nAddress={host.ip}/{prefix}\nGateway={host_ip}\n"
        "LinkLocalAddressing=no\nIPv6AcceptRA=no\n")
    (etc / "apt/apt.conf.d/00skyrack-lab-proxy").write_text(
        f'// The lab host\'s apt proxy: the only way out of this node.\nAcquire::http::Proxy "{apt_proxy}";\n')
    for timer in ("apt-daily.timer", "apt-daily-upgrade.timer"):  # no package runs behind Ansible's back
        link = etc / "systemd/system" / timer
        if not link.is_symlink():
            link.symlink_to("/dev/null")
    ssh = root / "root/.ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh / "authorized_keys").write_text(authorized_key)
    (ssh / "authorized_keys").chmod(0o600)
    seed(root, host.name, user_data, seed_id)


FABRIC_ROUTES = "etc/systemd/network/80-container-host0.network.d/50-skyrack-lab-fabric.conf"


def write_routes(root: Path, routes: Sequence[tuple[str, str]]) -> None:
    """The node's routes through the lab's stand-in for the site and Azure (network.fabric_routes), as a
    drop-in of its host0 network, written at every boot from the current plan; none: no drop-in."""
    path = root / FABRIC_ROUTES
    if not routes:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# skyrack lab: what the site's routers and Azure's route table do in production "
                    "(skyrack.lab.network.fabric_routes)\n" +
                    "".join(f"\n[Route]\nDestination={cidr}\nGateway={via}\n" for cidr, via in routes))


def seed(root: Path, name: str, user_data: str | None, seed_id: str = "0") -> None:
    """The NoCloud seed: the given user-data, or an empty config that finishes cleanly.

    The instance-id carries `seed_id` (a hash of the user-data): cloud-init runs once per
    instance, so a node re-seeded with other user-data runs it on its next boot, and one
    rebooted with the same seed does not run it again. It may hold private keys: 0600."""
    d = root / "var/lib/cloud/seed/nocloud"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    (d / "meta-data").write_text(f"instance-id: skyrack-lab-{name}-{seed_id}\nlocal-hostname: {name}\n")
    fd = os.open(d / "user-data", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(user_data if user_data is not None else EMPTY_USER_DATA)
    os.chmod(d / "user-data", 0o600)


def host_keys(root: Path) -> list[str]:
    return [p.read_text().split()[0] + " " + p.read_text().split()[1]
            for p in sorted((root / "etc/ssh").glob("ssh_host_*_key.pub"))]


def machine(bridge: str, name: str) -> str:
    """nspawn's machine name: unique per lab, since it names the host side of the node's veth."""
    return f"{bridge}-{name}"


def cgroup_dirs(lab: str, name: str) -> list[Path]:
    """The node's own cgroup in every hierarchy the host mounts (cgroup v1 controllers, systemd, unified).

    kubelet and runc inside the node create cgroups below it, so each controller must see the
    node in a group of its own, not in the host's root or the launching shell's group.
    """
    if not CGROUP_FS.is_dir():
        return []
    if (CGROUP_FS / "cgroup.controllers").exists():  # a pure cgroup v2 host: one hierarchy
        return [CGROUP_FS / f"skyrack-lab-{lab}" / name]
    return [h / f"skyrack-lab-{lab}" / name for h in sorted(CGROUP_FS.iterdir())
            if h.is_dir() and not h.is_symlink() and (h / "cgroup.procs").exists()]


def _make_cgroup(group: Path) -> None:
    """mkdir the group (and the lab's parent); a cpuset group needs cpus and mems before a task can join."""
    for d in (group.parent, group):
        d.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            mine, parent = d / knob, d.parent / knob
            if mine.exists() and not mine.read_text().strip():
                mine.write_text(parent.read_text())


def start(paths: Paths, host: Host, bridge: str, binds: Sequence[str] = ()) -> int:
    """Boot the node; return the launcher's PID. Each launcher gets its own cgroup. `binds`: more
    systemd-nspawn bind flags (an execution node's, lab/mesh.py)."""
    root = merged(paths, host.name)
    groups = cgroup_dirs(bridge, host.name)
    for g in groups:
        _make_cgroup(g)

    def enter_cgroups() -> None:  # runs in the child between fork and exec
        for g in groups:
            (g / "cgroup.procs").write_text(str(os.getpid()))

    paths.log_dir.mkdir(parents=True, exist_ok=True)
    log = (paths.log_dir / f"{host.name}.log").open("ab")
    cmd = ["systemd-nspawn", "-D", str(root), "--boot", "--register=no", "--keep-unit", f"--network-bridge={bridge}",
           "-M", machine(bridge, host.name), *CONTAINER_HOST_FLAGS, f"--bind={paths.node_dir(host.name) / 'data'}:/data",
           # containerd's overlay snapshots cannot live on the node's own overlay root: a disk of their own
           f"--bind={paths.node_dir(host.name) / 'containerd'}:/var/lib/containerd", *binds]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                            preexec_fn=enter_cgroups)
    log.close()
    return proc.pid


def alive(host: Host, bridge: str) -> bool:
    """True if the recorded PID is still this node's systemd-nspawn (not a reused PID)."""
    if not host.pid:
        return False
    try:
        cmdline = Path(f"/proc/{host.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and cmdline[0].endswith(b"systemd-nspawn") and machine(bridge, host.name).encode() in cmdline


def stop(paths: Paths, host: Host, bridge: str, timeout: float = 30) -> None:
    """Orderly halt (SIGTERM to nspawn), SIGKILL after `timeout`; then release cgroups and /run leftovers."""
    if alive(host, bridge):
        assert host.pid is not None
        os.kill(host.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while alive(host, bridge) and time.monotonic() < deadline:
            _reap(host.pid)
            time.sleep(0.2)
        if alive(host, bridge):
            os.killpg(host.pid, signal.SIGKILL)
            while alive(host, bridge):
                _reap(host.pid)
                time.sleep(0.1)
    host.pid = None
    groups = cgroup_dirs(bridge, host.name)
    kill_leftovers(groups)
    for g in groups:
        _rmdir_tree(g)
    shutil.rmtree(f"/run/systemd/nspawn/propagate/{machine(bridge, host.name)}", ignore_errors=True)


def kill_leftovers(groups: list[Path], timeout: float = 10) -> None:
    """SIGKILL whatever still runs in a node's cgroups: a node whose nspawn was killed
    (a crash) leaves its container's processes behind, holding its disk and address."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = {int(pid) for g in groups if g.is_dir() for procs in g.rglob("cgroup.procs")
                for pid in procs.read_text().split()}
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _rmdir_tree(path: Path) -> None:
    if not path.is_dir():
        return
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if child.is_dir():
            try:
                child.rmdir()
            except OSError:
                pass
    try:
        path.rmdir()
        path.parent.rmdir()  # the lab's own cgroup, once its last node is gone
    except OSError:
        pass


def remove(paths: Paths, name: str) -> None:
    unmount(paths, name)
    shutil.rmtree(paths.node_dir(name), ignore_errors=True)


def wait_ssh(ip: str, deadline: float) -> bool:
    """Wait until the node's sshd sends its banner."""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((ip, 22), timeout=1) as s:
                s.settimeout(2)
                if s.recv(4).startswith(b"SSH-"):
                    return True
        except OSError:
            pass
        time.sleep(0.3)
    return False
