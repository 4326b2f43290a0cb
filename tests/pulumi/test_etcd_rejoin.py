"""A wiped etcd member rejoins by itself: skyrack-etcd-member, run with a stand-in etcdctl.

The script is taken from the member's real user-data; only its paths and etcdctl are pointed
at the test's directory and its retry delay set to 0 (SKYRACK_* variables). The stand-in answers `member list` like
etcdctl's simple format (or fails like an unreachable cluster) and records every call.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from skyrack import certs
from skyrack import plan as planmod
from skyrack.render import cloud_init

REPO = "https://pkgs.k8s.io/core:/stable:/v1.37/deb/"

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FAKE_ETCDCTL = """#!/bin/sh
echo "$*" >> "$CALLS"
case "$*" in
  *"member list"*) [ -f "$MEMBERS" ] || exit 1; cat "$MEMBERS" ;;
  *"member add"*) echo "Member 99 added" ;;
esac
"""


@pytest.fixture(scope="module")
def member_script() -> tuple[planmod.Plan, planmod.Member, str]:
    plan = planmod.make(CONFIGS / "dev.yaml")
    member = plan.members_of("etcd")[1]
    issued = certs.issue_all(plan)
    config = yaml.safe_load(cloud_init.etcd(plan, member, cloud_init.EtcdPki.issued(issued, member.name),
                                             kubernetes_repo=REPO))
    files = {f["path"]: f["content"] for f in config["write_files"]}
    unit = files["/etc/systemd/system/skyrack-etcd.service"]
    # The unit runs it after the disk is mounted and takes the state from its file.
    assert unit.index("skyrack-etcd-disk") < unit.index("skyrack-etcd-member")
    assert f"EnvironmentFile=-{cloud_init.ETCD_STATE_FILE}" in unit
    assert "--initial-cluster-state=${SKYRACK_ETCD_STATE}" in unit
    return plan, member, files["/usr/local/sbin/skyrack-etcd-member"]


def run(tmp_path: Path, script: str, members: str | None, data: bool = False) -> tuple[str, list[str], str]:
    ctl = tmp_path / "etcdctl"
    ctl.write_text(FAKE_ETCDCTL)
    ctl.chmod(0o755)
    if members is not None:
        (tmp_path / "members").write_text(members)
    datadir = tmp_path / "data"
    if data:
        (datadir / "member").mkdir(parents=True)
    (tmp_path / "calls").touch()
    # a failing list is retried 3 times, 2 s apart, on a real member; here without the wait
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "SKYRACK_ETCDCTL": str(ctl), "SKYRACK_ETCD_RETRY_SECONDS": "0",
                                           "SKYRACK_ETCD_DATA": str(datadir),
                                           "SKYRACK_ETCD_STATE_FILE": str(tmp_path / "run" / "state.env"),
                                           "CALLS": str(tmp_path / "calls"), "MEMBERS": str(tmp_path / "members")})
    assert proc.returncode == 0, proc.stderr
    state = (tmp_path / "run" / "state.env").read_text()
    return state, (tmp_path / "calls").read_text().splitlines(), proc.stdout


def listing(plan: planmod.Plan, started: dict[str, str]) -> str:
    """`etcdctl member list` of the dev cluster; `started` maps member name -> status for it."""
    out = []
    for i, m in enumerate(plan.members_of("etcd")):
        status = started.get(m.name, "started")
        name = m.name if status == "started" else ""
        client = f"https://{m.ip}:2379" if status == "started" else ""
        out.append(f"{i + 10:x}a1b2c3d4e5f60, {status}, {name}, https://{m.ip}:2380, {client}, false")
    return "\n".join(out) + "\n"


def test_a_wiped_member_removes_its_old_identity_and_rejoins_as_existing(tmp_path, member_script) -> None:
    plan, member, script = member_script
    state, calls, out = run(tmp_path, script, listing(plan, {}))
    assert state == "SKYRACK_ETCD_STATE=existing\n"
    others = ",".join(f"https://{m.ip}:2379" for m in plan.members_of("etcd") if m != member)
    assert calls[0].startswith(f"--endpoints={others} ") and calls[0].endswith("member list")
    assert calls[1].endswith("member remove ba1b2c3d4e5f60")  # member index 1's ID
    assert calls[2].endswith(f"member add {member.name} --peer-urls=https://{member.ip}:2380")
    assert len(calls) == 3 and "lost its data: removed and added again" in out


def test_the_first_boot_of_a_new_cluster_starts_as_new(tmp_path, member_script) -> None:
    _, _, script = member_script
    state, calls, out = run(tmp_path, script, None)  # nobody answers yet
    assert state == "SKYRACK_ETCD_STATE=new\n"
    assert calls == [calls[0]] * 3 and calls[0].endswith("member list")  # asked three times, changed nothing
    assert "the cluster is being created" in out


def test_an_added_member_not_started_yet_is_kept(tmp_path, member_script) -> None:
    plan, member, script = member_script
    state, calls, _ = run(tmp_path, script, listing(plan, {member.name: "unstarted"}))
    assert state == "SKYRACK_ETCD_STATE=existing\n" and len(calls) == 1  # no remove, no second add


def test_a_member_with_data_asks_nobody(tmp_path, member_script) -> None:
    _, _, script = member_script
    state, calls, _ = run(tmp_path, script, None, data=True)
    assert state == "SKYRACK_ETCD_STATE=new\n" and calls == []  # etcd ignores the initial state with data
