"""A Kubernetes lab refuses to start on a disk its kubelets would evict pods from (they share the host's)."""

from __future__ import annotations

import os

import pytest

from skyrack.lab import lifecycle


class FakeStat:
    def __init__(self, free: int, total: int = 100):
        self.f_bavail, self.f_blocks = free, total


def test_a_nearly_full_disk_is_refused_with_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "statvfs", lambda _p: FakeStat(14))
    with pytest.raises(lifecycle.LabError, match=r"14% of its filesystem is free.*15%.*go clean -cache"):
        lifecycle.check_disk(tmp_path)


def test_enough_free_space_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "statvfs", lambda _p: FakeStat(40))
    lifecycle.check_disk(tmp_path)
    lifecycle.check_disk(tmp_path / "created")  # the state root may not exist yet
    assert (tmp_path / "created").is_dir()
