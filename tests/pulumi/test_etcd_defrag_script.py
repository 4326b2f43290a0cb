"""The members' own defragmentation (skyrack-etcd-defrag), run as rendered against a stand-in etcdctl that
records what it was asked: the decisions are the script's, the cluster's answers are given. The real thing
runs in tests/etcd (test_defragmentation_takes_one_member_at_a_time_the_leader_last_while_writes_go_on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from etcd_files import CONFIGS, install, member_files

from skyrack import plan as planmod
from skyrack.render import cloud_init

# A stand-in for etcdctl: answers from $FAKE_STATE (JSON), appends each call to $FAKE_CALLS; `lock NAME CMD...`
# runs CMD as etcdctl does (with ETCD_LOCK_KEY set), holding nothing.
FAKE = r'''#!/usr/bin/env python3
import json, os, subprocess, sys
state = json.load(open(os.environ["FAKE_STATE"]))
args = [a for a in sys.argv[1:] if not a.startswith("--endpoints=") and not a.startswith("--command-timeout=")]
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
if args[0] == "lock":
    sys.exit(subprocess.run(args[2:], env={**os.environ, "ETCD_LOCK_KEY": args[1] + "/694d8"}).returncode)
me = state["me"]
def status(m):
    return {"Endpoint": m, "Status": {"header": {"member_id": state["ids"][m]}, "leader": state["ids"][state["leader"]],
                                      "dbSize": state["size"][m], "dbSizeInUse": state["size"][m] // 2}}
if args[:2] == ["endpoint", "health"]:
    print(json.dumps([{"endpoint": m, "health": m not in state.get("sick", [])} for m in state["ids"]]))
elif args[:2] == ["endpoint", "status"]:
    print(json.dumps([status(m) for m in (state["ids"] if "--cluster" in args else [me])]))
elif args[0] == "alarm" and args[1] == "list":
    print("memberID:1 alarm:NOSPACE" if state.get("nospace") else "")
'''


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    _, _, files = member_files()
    d = tmp_path_factory.mktemp("defrag")
    install(d / "etcdctl", FAKE.replace("#!/usr/bin/env python3", f"#!{sys.executable}", 1))
    return install(d / "skyrack-etcd-defrag",
                   files["/usr/local/sbin/skyrack-etcd-defrag"].replace("#!/usr/bin/python3", f"#!{sys.executable}", 1))


def run(script: Path, tmp_path: Path, **state) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    base = {"me": "a", "ids": {"a": 10, "b": 11, "c": 12}, "leader": "b", "size": {"a": 900, "b": 900, "c": 900}}
    (tmp_path / "state.json").write_text(json.dumps({**base, **state}))
    env = {**os.environ, "SKYRACK_ETCDCTL": str(script.with_name("etcdctl")), "FAKE_STATE": str(tmp_path / "state.json"),
           "FAKE_CALLS": str(tmp_path / "calls")}
    proc = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60)
    calls = [json.loads(line) for line in (tmp_path / "calls").read_text().splitlines()]
    return proc, [[a for a in c if not a.startswith("--command-timeout")] for c in calls]


def verbs(calls: list[list[str]]) -> list[str]:
    return [" ".join(a for a in c if not a.startswith("--endpoints=") and a not in ("-w", "json")) for c in calls]


def test_it_takes_the_clusters_lock_through_every_member_first(script, tmp_path):
    proc, calls = run(script, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lock = calls[0]
    assert lock[1:3] == ["lock", "skyrack-defrag-etcd"] and lock[-1].endswith("skyrack-etcd-defrag")
    plan = planmod.make(CONFIGS / "dev.yaml")
    assert lock[0] == "--endpoints=" + ",".join(cloud_init.etcd_endpoints(plan))


def test_a_follower_defragments_itself_and_nothing_else(script, tmp_path):
    proc, calls = run(script, tmp_path)
    assert proc.returncode == 0
    assert "defrag" in verbs(calls) and not any(v.startswith("move-leader") for v in verbs(calls))
    assert all(c[0] == "--endpoints=https://127.0.0.1:2379" for c in calls[1:]), "only this member, not the cluster"


def test_a_leader_hands_its_leadership_over_before_it_defragments(script, tmp_path):
    proc, calls = run(script, tmp_path, leader="a")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    v = verbs(calls)
    assert v.index("move-leader b") < v.index("defrag")  # member 11 is b: its ID in hex
    assert "leadership handed to b first" in proc.stdout


def test_nothing_happens_while_a_member_is_unhealthy(script, tmp_path):
    proc, calls = run(script, tmp_path, sick=["c"])
    assert proc.returncode == 1 and "not defragmenting: c not healthy" in proc.stdout
    assert "defrag" not in verbs(calls)


@pytest.mark.parametrize(("size", "disarmed"), [(900, True), (9 * 1024**3, False)])  # dev: an 8 GiB quota
def test_nospace_is_disarmed_only_when_every_member_is_under_the_quota(script, tmp_path, size, disarmed):
    proc, calls = run(script, tmp_path, nospace=True, size={"a": 900, "b": 900, "c": size})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("alarm disarm" in verbs(calls)) is disarmed
    assert ("NOSPACE disarmed" in proc.stdout) is disarmed and ("NOSPACE stays" in proc.stdout) is not disarmed


def test_every_member_of_a_cluster_has_its_own_minute():
    plan = planmod.make(CONFIGS / "prod.yaml")
    for role in ("etcd", "etcd-events"):
        times = [cloud_init.etcd_defrag_time(plan, m) for m in plan.members_of(role)]
        assert len(set(times)) == len(times) and {h for h, _ in times} == {plan.env.control_plane.etcd.defrag_hour_utc}
