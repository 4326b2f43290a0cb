"""A node's root that is busy for a moment after its processes were killed is unmounted all the same."""

from __future__ import annotations

import subprocess

from skyrack.lab import nodes
from skyrack.lab.state import Paths


class FakeMounts:
    def __init__(self, busy_for: int):
        self.busy_for, self.mounted, self.calls = busy_for, True, []

    def run(self, args, **_kw):
        self.calls.append(args[1] if args[1] == "--lazy" else "umount")
        if args[1] == "--lazy" or len(self.calls) > self.busy_for:
            self.mounted = False
            return subprocess.CompletedProcess(args, 0, "", "")
        return subprocess.CompletedProcess(args, 32, "", "umount: target is busy.")


def fake(monkeypatch, busy_for: int) -> FakeMounts:
    mounts = FakeMounts(busy_for)
    monkeypatch.setattr(nodes.subprocess, "run", mounts.run)
    monkeypatch.setattr(nodes, "is_mounted", lambda _t: mounts.mounted)
    monkeypatch.setattr(nodes.time, "sleep", lambda _s: None)
    return mounts


def test_a_root_busy_for_a_moment_is_unmounted_when_it_is_free(tmp_path, monkeypatch):
    mounts = fake(monkeypatch, busy_for=3)
    nodes.unmount(Paths(tmp_path), "x01")
    assert mounts.calls == ["umount"] * 4 and not mounts.mounted


def test_a_root_that_stays_busy_is_detached_and_said(tmp_path, monkeypatch):
    mounts, said = fake(monkeypatch, busy_for=10**6), []
    clock = iter(range(0, 1000, 5))
    monkeypatch.setattr(nodes.time, "monotonic", lambda: next(clock))
    nodes.unmount(Paths(tmp_path), "x01", timeout=15, say=said.append)
    assert mounts.calls[-1] == "--lazy" and not mounts.mounted
    assert said == ["x01: its root still busy after 15 s (umount: target is busy.): detached"]
