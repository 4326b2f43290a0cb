"""A Kubernetes lab refuses to boot hosts on a disk its kubelets would evict pods from (they share the host's),
counting what the new hosts will write; a host that already has its disk needs only the threshold."""

from __future__ import annotations

import os

import pytest

from skyrack.lab import lifecycle

GIB = 2**30


class FakeStat:
    def __init__(self, free_gib: float, total_gib: int = 100):
        self.f_frsize = 4096
        self.f_bavail, self.f_blocks = int(free_gib * GIB) // 4096, total_gib * GIB // 4096


def test_a_nearly_full_disk_is_refused_with_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "statvfs", lambda _p: FakeStat(14))
    with pytest.raises(lifecycle.LabError, match=r"14 GiB \(14%\) of its filesystem is free, .*below 15%.*free at "
                                                 r"least 2 GiB first .*go clean -cache"):
        lifecycle.check_disk(tmp_path)


def test_new_hosts_need_room_for_what_they_write(tmp_path, monkeypatch):
    """Kubelet hosts write images and containers; etcd members and execution nodes far less."""
    assert lifecycle.host_bytes(["worker", "apiserver"]) == 2 * lifecycle.KUBELET_HOST_BYTES
    assert lifecycle.host_bytes(["etcd", "execution"]) == 2 * lifecycle.HOST_BYTES < lifecycle.KUBELET_HOST_BYTES
    per_host = lifecycle.KUBELET_HOST_BYTES / GIB
    free = lifecycle.MIN_FREE_SHARE * 100 + 2.5 * per_host  # room for two new workers, not three
    monkeypatch.setattr(os, "statvfs", lambda _p: FakeStat(free))
    lifecycle.check_disk(tmp_path, lifecycle.host_bytes(["worker"] * 2), 2)
    with pytest.raises(lifecycle.LabError, match=rf"; 3 new host\(s\) write about {3 * per_host:.0f} GiB"):
        lifecycle.check_disk(tmp_path, lifecycle.host_bytes(["worker"] * 3), 3)


def test_a_restarted_host_needs_only_the_threshold(tmp_path, monkeypatch):
    """What made a CI run fail: a test stopped a node and `lab up` started it again on a disk 17% free, which
    kubelets are content with; the old check refused it (18%) and every later test lost the node."""
    monkeypatch.setattr(os, "statvfs", lambda _p: FakeStat(17))
    lifecycle.check_disk(tmp_path)
    with pytest.raises(lifecycle.LabError):
        lifecycle.check_disk(tmp_path, lifecycle.KUBELET_HOST_BYTES, 1)


def test_enough_free_space_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "statvfs", lambda _p: FakeStat(90))
    lifecycle.check_disk(tmp_path, lifecycle.host_bytes(["worker"] * 9), 9)
    lifecycle.check_disk(tmp_path / "created")  # the state root may not exist yet
    assert (tmp_path / "created").is_dir()
