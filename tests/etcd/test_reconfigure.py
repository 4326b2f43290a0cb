"""Membership changes retried while etcd calls the cluster unhealthy, and only then; a defragmentation refused while
a member is unhealthy."""

from __future__ import annotations

import pytest

from skyrack.etcd import ops
from skyrack.etcd.client import EtcdError


def refusing(answers: list[object]):
    calls = []

    def fn():
        calls.append(1)
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a
    return fn, calls


def test_a_transient_unhealthy_cluster_refusal_is_retried(monkeypatch):
    monkeypatch.setattr(ops.time, "sleep", lambda s: None)
    unhealthy = EtcdError("https://198.18.4.52:2379: etcdserver: unhealthy cluster")
    fn, calls = refusing([unhealthy, unhealthy, {"ID": "42"}])
    assert ops.reconfigure(fn) == {"ID": "42"} and len(calls) == 3


def test_any_other_error_is_raised_at_once(monkeypatch):
    monkeypatch.setattr(ops.time, "sleep", lambda s: None)
    fn, calls = refusing([EtcdError("etcdserver: Peer URLs already exists"), {"ID": "42"}])
    with pytest.raises(EtcdError, match="already exists"):
        ops.reconfigure(fn)
    assert len(calls) == 1


def test_a_refusal_that_lasts_is_raised_after_the_timeout(monkeypatch):
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(ops.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(ops.time, "sleep", lambda s: None)
    fn, calls = refusing([EtcdError("etcdserver: unhealthy cluster")] * 20)
    with pytest.raises(EtcdError, match="unhealthy cluster"):
        ops.reconfigure(fn, timeout=30)
    assert 2 <= len(calls) <= 5


def test_defragmentation_is_refused_while_a_member_is_unhealthy(monkeypatch):
    """A member busy defragmenting beside a down one would take the quorum away: nothing is touched."""
    rows = [ops.MemberStatus("etcd", f"etcd-{i}", f"https://198.18.4.{52 + i}:2379", healthy=i != 1) for i in range(3)]
    monkeypatch.setattr(ops, "status", lambda target, clusters: rows)
    touched = []

    class Target:
        def client(self):
            touched.append("client")

    with pytest.raises(EtcdError, match=r"etcd-1 not healthy: .*`skyrack etcd status`"):
        ops.defragment(Target(), "etcd", say=touched.append)
    assert touched == []
