"""The lab's Debian base image: built once with debootstrap, cached, shared read-only by every node.

Each node boots from an overlay whose lower layer is this image (see nodes.py), so a new
node costs a few megabytes and no download. The image is rebuilt only when its recipe
(suite, packages, cloud-init settings) changes: the recipe's hash is stored beside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..build import mirrors
from ..build.cache import ROOT as CACHE_ROOT
from ..errors import InputError, Problem

CACHE_DIR = Path(os.environ.get("SKYRACK_LAB_CACHE") or CACHE_ROOT / "lab")
RECIPE_VERSION = 2
# What every node boots with; the roles install the rest, as on a real rack.
PACKAGES = ("openssh-server", "python3", "python3-apt", "systemd", "systemd-sysv", "iproute2", "dbus",
            "ca-certificates", "gnupg")
LATE_PACKAGES = ("cloud-init",)  # installed in a chroot, its services kept from starting
# Masked: what serves a person at a console, which no lab node has. Each holds inotify instances, and every
# node's count against root's one limit on this host (hostlimits.py: 4 of a node's 8 before anything runs),
# which a lab with two API servers would otherwise pass: the console's getty, the login manager (SSH
# sessions do without it: pam_systemd is optional) and the password-prompt forwarders. Nothing skyrack
# installs uses them; a production VM keeps them.
MASKED = ("console-getty.service", "systemd-logind.service", "systemd-ask-password-console.path",
          "systemd-ask-password-wall.path")
# cloud-init must not touch the network (the lab's static host0 file would lose to its DHCP
# fallback) and must use a locale that exists; NoCloud reads the per-node seed directory.
CLOUD_CFG = """\
# skyrack lab: NoCloud seed in /var/lib/cloud/seed/nocloud/, network configured by systemd-networkd.
datasource_list: [ NoCloud, None ]
network: {config: disabled}
disable_root: false
locale: C.UTF-8
# Keep the host keys `lab up` generated and wrote into known_hosts (cloud-init would replace them).
ssh_deletekeys: false
ssh_genkeytypes: []
"""


# The lab node's "hardware" for running containers (../shared/lab-notes.md): nspawn mounts the
# cgroup v1 controllers read-only and /proc/sys read-only. At boot, before anything else, this
# remounts the node's own cgroup controllers writable (it has CAP_SYS_ADMIN and no user namespace)
# and shows kubelet the kernel values it insists on through files bound over /proc/sys inside the
# node only: the host's own settings are never written.
NODE_KERNEL_VALUES = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
HOST_SETUP = """\
#!/bin/sh
# skyrack lab node: make this container able to run containers (see skyrack/lab/image.py).
set -eu
for c in /sys/fs/cgroup/*/; do
    mount -o remount,bind,rw "$c" 2>/dev/null || true
done
d=/run/skyrack-lab/sysctl
mkdir -p "$d"
""" + "".join(f"""\
if [ "$(cat /proc/sys/{k})" != "{v}" ]; then
    echo {v} > "$d/{k.replace('/', '.')}"
    mount --bind "$d/{k.replace('/', '.')}" /proc/sys/{k}
fi
""" for k, v in NODE_KERNEL_VALUES.items())
HOST_SETUP_UNIT = """\
[Unit]
Description=skyrack lab: let this node run containers (writable cgroups, kubelet's kernel values)
DefaultDependencies=no
Before=sysinit.target containerd.service kubelet.service
ConditionVirtualization=container

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/skyrack-lab-host-setup

[Install]
WantedBy=sysinit.target
"""


@dataclass(frozen=True)
class Image:
    rootfs: Path
    recipe: dict


def recipe(suite: str) -> dict:
    return {"version": RECIPE_VERSION, "suite": suite, "packages": PACKAGES, "late": LATE_PACKAGES,
            "cloud_cfg": hashlib.sha256(CLOUD_CFG.encode()).hexdigest()[:16], "masked": MASKED,
            "host_setup": hashlib.sha256((HOST_SETUP + HOST_SETUP_UNIT).encode()).hexdigest()[:16]}


def image_dir(suite: str, cache: Path = CACHE_DIR) -> Path:
    return cache / f"{suite}-{hashlib.sha256(json.dumps(recipe(suite)).encode()).hexdigest()[:12]}"


def cached(suite: str, cache: Path = CACHE_DIR) -> Image | None:
    d = image_dir(suite, cache)
    stamp = d / "recipe.json"
    if stamp.exists() and (d / "rootfs" / "usr/bin/python3").exists():
        return Image(d / "rootfs", json.loads(stamp.read_text()))
    return None


def ensure(suite: str, log: Path, say: Callable[[str], None] = print, cache: Path = CACHE_DIR) -> Image:
    """Return the cached image for `suite`, building it first if needed (about a minute)."""
    img = cached(suite, cache)
    if img is not None:
        return img
    source = mirrors.primary(suite)
    if source is None:
        raise InputError([Problem("/etc/apt", "", f"no HTTP Debian source for suite {suite!r} in this host's apt "
                                                  "configuration; the lab builds its image from it")])
    final = image_dir(suite, cache)
    work = final.with_name(final.name + ".building")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    root = work / "rootfs"
    started = time.monotonic()
    say(f"building the {suite} base image (debootstrap, once; cached in {final})")
    with log.open("a") as out:
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(root), source.uri],
             out, "debootstrap")
        (root / "etc/apt/sources.list").write_text(mirrors.sources_list(mirrors.sources()))
        policy = root / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")  # keep package scripts from starting services
        policy.chmod(0o755)
        env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
        _run(["chroot", str(root), "apt-get", "update", "-q"], out, "apt-get update", env)
        _run(["chroot", str(root), "apt-get", "install", "-y", "-q", "--no-install-recommends", *LATE_PACKAGES],
             out, "installing cloud-init", env)
        _run(["chroot", str(root), "apt-get", "clean"], out, "apt-get clean", env)
        policy.unlink()
        (root / "etc/cloud/cloud.cfg.d/90_lab.cfg").write_text(CLOUD_CFG)
        _run(["systemctl", f"--root={root}", "enable", "systemd-networkd"], out, "enabling systemd-networkd")
        script = root / "usr/local/sbin/skyrack-lab-host-setup"
        script.write_text(HOST_SETUP)
        script.chmod(0o755)
        (root / "etc/systemd/system/skyrack-lab-host-setup.service").write_text(HOST_SETUP_UNIT)
        _run(["systemctl", f"--root={root}", "enable", "skyrack-lab-host-setup.service"], out,
             "enabling skyrack-lab-host-setup")
        _run(["systemctl", f"--root={root}", "mask", *MASKED], out, "masking the console's units")
    # Identity is per node: nodes.py writes host keys, machine-id, hostname and resolv.conf.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    for name in ("etc/machine-id", "etc/hostname", "etc/resolv.conf"):
        p = root / name
        if p.exists() or p.is_symlink():
            p.unlink()
    (root / "etc/machine-id").write_text("")
    meta = {**recipe(suite), "built_seconds": round(time.monotonic() - started, 1)}
    (work / "recipe.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    work.rename(final)
    say(f"base image ready in {meta['built_seconds']} s")
    return Image(final / "rootfs", meta)


def _run(cmd: list[str], out, what: str, env: dict[str, str] | None = None) -> None:
    out.write(f"$ {' '.join(cmd)}\n")
    out.flush()
    proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}); see {out.name}")
