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
  *"endpoint status -w json"*)
    echo '[{"Endpoint":"https://127.0.0.1:2379","Status":{"header":{"cluster_id":16045690984833335023,"member_id":1}}}]' ;;
esac
"""


def user_data_files(plan: planmod.Plan, member: planmod.Member) -> dict[str, str]:
    issued = certs.issue_all(plan)
    config = yaml.safe_load(cloud_init.etcd(plan, member, cloud_init.EtcdPki.issued(issued, member.name),
                                             kubernetes_repo=REPO))
    return {f["path"]: f["content"] for f in config["write_files"]}


@pytest.fixture(scope="module")
def member_script() -> tuple[planmod.Plan, planmod.Member, str]:
    plan = planmod.make(CONFIGS / "dev.yaml")
    member = plan.members_of("etcd")[1]
    files = user_data_files(plan, member)
    unit = files["/etc/systemd/system/skyrack-etcd.service"]
    # The unit runs it after the disk is mounted and takes the state from its file; once etcd is
    # ready (in a quorum) it marks the machine, ignoring a failure to; it never stops retrying.
    assert unit.index("skyrack-etcd-disk") < unit.index("ExecStartPre=+/usr/local/sbin/skyrack-etcd-member\n")
    assert "ExecStartPost=-+/usr/local/sbin/skyrack-etcd-member --mark\n" in unit and "Type=notify" in unit
    assert "StartLimitIntervalSec=0" in unit and "Restart=always" in unit and "RestartSec=5s" in unit
    assert f"EnvironmentFile=-{cloud_init.ETCD_STATE_FILE}" in unit
    assert "--initial-cluster-state=${SKYRACK_ETCD_STATE}" in unit
    return plan, member, files["/usr/local/sbin/skyrack-etcd-member"]


def run(tmp_path: Path, script: str, members: str | None, data: bool = False, marked: bool = False,
        args: tuple[str, ...] = (), rc: int = 0) -> tuple[str, list[str], str]:
    ctl = tmp_path / "etcdctl"
    ctl.write_text(FAKE_ETCDCTL)
    ctl.chmod(0o755)
    if members is not None:
        (tmp_path / "members").write_text(members)
    datadir = tmp_path / "data"
    if data:
        (datadir / "member").mkdir(parents=True)
    marker = tmp_path / "os-disk" / "etcd.cluster"
    if marked:
        marker.parent.mkdir()
        marker.write_text("deadbeef\n")
    (tmp_path / "calls").touch()
    # a failing list is retried 3 times, 2 s apart, on a real member; here without the wait
    proc = subprocess.run(["sh", "-c", script, "skyrack-etcd-member", *args], capture_output=True, text=True,
                          timeout=30, env={"PATH": "/usr/bin:/bin", "SKYRACK_ETCDCTL": str(ctl),
                                           "SKYRACK_ETCD_RETRY_SECONDS": "0", "SKYRACK_ETCD_DATA": str(datadir),
                                           "SKYRACK_ETCD_STATE_FILE": str(tmp_path / "run" / "state.env"),
                                           "SKYRACK_ETCD_MARKER": str(marker),
                                           "CALLS": str(tmp_path / "calls"), "MEMBERS": str(tmp_path / "members")})
    assert proc.returncode == rc, (proc.stdout, proc.stderr)
    state_file = tmp_path / "run" / "state.env"
    state = state_file.read_text() if state_file.exists() else ""
    return state, (tmp_path / "calls").read_text().splitlines(), proc.stdout + proc.stderr


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


def test_an_emptied_member_of_a_cluster_that_existed_refuses_to_start_it_anew(tmp_path, member_script) -> None:
    """Every member's data disk wiped (a size change reallocated them all): nobody answers, but the
    marker on the OS disk says the cluster existed. Starting as `new` would hand the API servers an
    empty cluster; the member refuses, changes nothing, and names the restore."""
    _, member, script = member_script
    state, calls, out = run(tmp_path, script, None, marked=True, rc=1)
    assert state == "" and all(c.endswith("member list") for c in calls) and len(calls) == 3
    assert f"REFUSED to start {member.name}" in out and "cluster deadbeef" in out
    assert "\n  skyrack etcd restore configs/dev.yaml --cluster etcd --snapshot latest --yes\n" in out


def test_a_marked_member_still_rejoins_a_cluster_that_answers(tmp_path, member_script) -> None:
    plan, _, script = member_script
    state, calls, _ = run(tmp_path, script, listing(plan, {}), marked=True)
    assert state == "SKYRACK_ETCD_STATE=existing\n" and calls[1].endswith("member remove ba1b2c3d4e5f60")


def test_a_marked_member_with_data_starts_as_it_was(tmp_path, member_script) -> None:
    _, _, script = member_script
    state, calls, _ = run(tmp_path, script, None, data=True, marked=True)
    assert state == "SKYRACK_ETCD_STATE=new\n" and calls == []


def test_mark_records_the_cluster_id_of_the_running_member(tmp_path, member_script) -> None:
    _, _, script = member_script
    _, calls, out = run(tmp_path, script, None, args=("--mark",))
    assert f"marked in {tmp_path}/os-disk/etcd.cluster" in out
    assert calls == ["--endpoints=https://127.0.0.1:2379 --dial-timeout=3s --command-timeout=10s endpoint status -w json"]
    assert (tmp_path / "os-disk" / "etcd.cluster").read_text() == f"{16045690984833335023:x}\n"
    assert not (tmp_path / "run" / "state.env").exists()  # marking decides nothing about the start


def test_the_events_cluster_starts_anew_and_keeps_no_marker(tmp_path) -> None:
    """Events carry a one-hour lease: an emptied events cluster loses nothing the cluster needs."""
    plan = planmod.make(CONFIGS / "prod.yaml")
    events = plan.members_of("etcd-events")[0]
    files = user_data_files(plan, events)
    assert "--mark" not in files["/etc/systemd/system/skyrack-etcd.service"]
    state, _, out = run(tmp_path, files["/usr/local/sbin/skyrack-etcd-member"], None, marked=True)
    assert state == "SKYRACK_ETCD_STATE=new\n" and "being created" in out
