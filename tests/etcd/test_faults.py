"""Faults in a 5-member cluster with a writer committing numbered keys throughout: no acknowledged write is lost.

Stop the leader, power off a second member (3 of 5 left: writes go on), stop a third
(quorum lost: writes stop), bring one back (writes resume), then read every key the
writer saw acknowledged.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time

import etcdlab
import pytest
from etcdlab import EtcdLab

from skyrack.etcd.client import EtcdError

pytestmark = [pytest.mark.lab, pytest.mark.slow]
lab5 = etcdlab.lab5  # the module's lab: 5 etcd members, one API-server node


class Writer(threading.Thread):
    """Writes /faults/000000, 000001, ... in order; a key is retried until acknowledged, then the next."""

    def __init__(self, lab: EtcdLab):
        super().__init__(daemon=True)
        self.client, self.endpoints = lab.client(timeout=2), lab.endpoints()
        self.acked: list[tuple[int, float]] = []
        self.failures = 0
        self.halt = threading.Event()

    def run(self) -> None:
        n, i = 0, 0
        while not self.halt.is_set():
            try:
                self.client.put(self.endpoints[i % len(self.endpoints)], f"/faults/{n:06d}", f"write-{n}")
                self.acked.append((n, time.monotonic()))
                n += 1
            except EtcdError:
                self.failures += 1
                i += 1  # that member may be down: try the next one
                time.sleep(0.05)

    def count(self) -> int:
        return len(self.acked)

    def wait_for(self, more: int, timeout: float) -> float:
        """Seconds until `more` further writes were acknowledged; fails after `timeout`."""
        start, target = time.monotonic(), self.count() + more
        while self.count() < target:
            if time.monotonic() - start > timeout:
                raise AssertionError(f"only {self.count() - target + more} of {more} writes in {timeout} s")
            time.sleep(0.1)
        return time.monotonic() - start

    def longest_gap(self, since: float) -> float:
        times = [since] + [t for _, t in self.acked if t >= since]
        return max(b - a for a, b in itertools.pairwise(times)) if len(times) > 1 else float("inf")


def leader(lab: EtcdLab) -> str:
    return next(m["name"] for m in lab.status() if m["leader"])


def test_writes_survive_member_loss_and_no_acknowledged_write_is_lost(lab5: EtcdLab):
    members = [m.name for m in lab5.plan.members_of("etcd")]
    assert len(members) == 5 and all(m["healthy"] for m in lab5.status())
    w = Writer(lab5)
    w.start()
    figures: dict[str, float] = {}
    try:
        w.wait_for(50, timeout=30)
        rate_start, rate_n = time.monotonic(), w.count()
        time.sleep(3)
        figures["writes per second, 5 of 5"] = (w.count() - rate_n) / (time.monotonic() - rate_start)

        first = leader(lab5)
        t = time.monotonic()
        lab5.ssh.run(first, "systemctl stop skyrack-etcd")
        figures["s to 20 writes after stopping the leader"] = w.wait_for(20, timeout=30)
        figures["longest pause after stopping the leader, s"] = w.longest_gap(t)

        second = next(m for m in members if m not in (first, leader(lab5)))
        lab5.cli("lab", "stop", second)  # power off: 3 of 5 left, still a quorum
        figures["s to 20 writes after powering off a second member"] = w.wait_for(20, timeout=30)

        third = next(m for m in members if m not in (first, second, leader(lab5)))
        lab5.ssh.run(third, "systemctl stop skyrack-etcd")  # 2 of 5: no quorum
        time.sleep(3)  # writes in flight when quorum went settle
        stalled = w.count()
        time.sleep(8)
        assert w.count() == stalled, "a write was acknowledged without a quorum"

        t = time.monotonic()
        lab5.ssh.run(first, "systemctl start --no-block skyrack-etcd")  # 3 of 5 again
        w.wait_for(20, timeout=60)
        figures["s from a member's return to writes resuming"] = min(t2 for _, t2 in w.acked[stalled:]) - t
    finally:
        w.halt.set()
        w.join(timeout=10)
    lab5.ssh.run(third, "systemctl start --no-block skyrack-etcd")
    lab5.cli("etcd", "lab-up")  # boots the powered-off member; it catches up from the leader
    deadline = time.monotonic() + 60
    while not all(m["healthy"] for m in lab5.status()):
        assert time.monotonic() < deadline, lab5.status()
        time.sleep(1)

    acked = {n for n, _ in w.acked}
    for m in lab5.plan.members_of("etcd"):  # every member, from its own copy of the data
        stored = lab5.client(timeout=30).get_prefix(f"https://{m.ip}:2379", "/faults/", serializable=False)
        missing = [n for n in sorted(acked) if stored.get(f"/faults/{n:06d}") != f"write-{n}"]
        assert not missing, f"{m.name}: {len(missing)} acknowledged writes lost, first {missing[:5]}"
    figures["acknowledged writes, all read back"] = len(acked)
    figures["failed attempts (refused or timed out, retried)"] = w.failures
    for k, v in figures.items():
        print(f"[faults] {k}: {v:.2f}" if isinstance(v, float) else f"[faults] {k}: {v}", file=sys.stderr)
