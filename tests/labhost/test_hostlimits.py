"""Root's inotify instances, which every lab node shares (skyrack.lab.hostlimits): counted as the kernel
counts them, and a warning before a lab boots more nodes than would fit."""

from __future__ import annotations

import ctypes
import os

import pytest

from skyrack.lab import hostlimits


def test_in_use_counts_an_instance_this_process_opens():
    if os.geteuid() != 0:
        pytest.skip("counts root's instances")
    libc = ctypes.CDLL(None, use_errno=True)
    before = hostlimits.in_use()
    fds = [libc.inotify_init1(0) for _ in range(3)]
    try:
        assert all(fd >= 0 for fd in fds), ctypes.get_errno()
        # ours are counted (other processes may open or close a few meanwhile)
        assert hostlimits.in_use() - before in range(1, 10)
    finally:
        for fd in fds:
            os.close(fd)


def test_the_limit_is_the_kernels():
    assert hostlimits.limit() == int(open("/proc/sys/fs/inotify/max_user_instances").read())


def test_a_lab_that_would_not_fit_is_warned_about_with_what_to_do():
    roles = ["etcd"] * 3 + ["apiserver"] * 2 + ["worker"] * 3 + ["execution"] * 2
    assert hostlimits.needed(roles) == 3 * 4 + 2 * 27 + 3 * 14 + 2 * 4
    assert hostlimits.inotify_warning(roles, used=5, most=128) is None
    warning = hostlimits.inotify_warning(roles, used=20, most=128)
    assert warning is not None and "root holds 20 of its 128 inotify instances" in warning
    assert "10 more node(s) need about 116" in warning and "skyrack lab down" in warning
    assert hostlimits.inotify_warning([], used=200, most=128) is None
