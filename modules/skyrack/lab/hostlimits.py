"""Host limits the lab's nodes share, and how close a lab is to them: inotify instances.

Every lab node is a systemd-nspawn container whose processes run as the host's root (no user
namespace: see docs/lab.md), so each inotify instance a node's systemd, containerd or kubelet opens
counts against root's one per-user limit, `fs.inotify.max_user_instances` (128 on this host). That is
a kernel setting of the host, which skyrack never changes. When it runs out, whatever starts next
fails with "too many open files": seen as containerd's CRI plugin not loading ("failed to create
fsnotify watcher"), so `kubeadm init` finds no CRI. So `lab up` says so before it boots nodes that
would not fit, with what to do, instead of leaving a mysterious bootstrap failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

LIMIT_FILE = Path("/proc/sys/fs/inotify/max_user_instances")
# Measured per node of a running lab (2026-12-04, Kubernetes 1.37.2, the image without the console's
# units: image.MASKED): an API server 27 (kubelet 7, the leading controller manager 7, kube-apiserver 6,
# systemd 3, containerd 2, ...), a joined worker 14, an etcd member or an execution node 4 (systemd 3,
# dbus). configs/lab.yaml's ten nodes, ready: 111 of 128.
PER_NODE = {"apiserver": 27, "worker": 14}
PER_OTHER_NODE = 4


def in_use(uid: int = 0) -> int:
    """How many inotify instances processes of `uid` hold (each is an fd on an anon_inode:inotify)."""
    count = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if proc.stat().st_uid != uid:
                continue
            for fd in (proc / "fd").iterdir():
                try:
                    if os.readlink(fd) == "anon_inode:inotify":
                        count += 1
                except OSError:
                    continue
        except OSError:  # the process is gone, or not ours to read
            continue
    return count


def limit() -> int | None:
    try:
        return int(LIMIT_FILE.read_text())
    except (OSError, ValueError):
        return None


def needed(roles: Iterable[str]) -> int:
    return sum(PER_NODE.get(r, PER_OTHER_NODE) for r in roles)


def inotify_warning(roles: list[str], used: int | None = None, most: int | None = None) -> str | None:
    """A warning when booting nodes of these roles would likely pass root's inotify limit, else None."""
    most = limit() if most is None else most
    if most is None or not roles:
        return None
    used = in_use() if used is None else used
    want = needed(roles)
    if used + want <= most:
        return None
    return (f"root holds {used} of its {most} inotify instances (fs.inotify.max_user_instances, a setting of "
            f"this host that skyrack leaves alone) and {len(roles)} more node(s) need about {want}: a node may "
            "fail to start containerd's CRI or kubelet ('too many open files'). Is another lab up? "
            "(`skyrack lab down` it, or `ls /var/lib/skyrack/lab`)")
