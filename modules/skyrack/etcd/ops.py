"""The procedures behind `skyrack etcd ...`: status, defragmentation, snapshot, restore and member replacement.

Every step names the member it acts on and says what it did; a step that fails stops
the procedure with the member and the reason. See docs/etcd.md for when to use which.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from ..plan import Member, Plan
from ..render import cloud_init
from . import backup
from .client import Client, EtcdError, Tls
from .remote import Ssh

UNIT = "skyrack-etcd.service"
REJOIN_DROPIN = f"/etc/systemd/system/{UNIT}.d/50-skyrack-rejoin.conf"
Say = Callable[[str], None]


@dataclass(frozen=True)
class Target:
    """One environment's etcd, as the operator reaches it."""

    plan: Plan
    tls: Tls
    ssh: Ssh | None = None
    blob_connection: str | None = None

    def client(self, timeout: float = 5) -> Client:
        return Client(self.tls, timeout)

    def members(self, cluster: str) -> list[Member]:
        members = self.plan.members_of(cluster)
        if not members:
            raise ValueError(f"environment {self.plan.env.name} has no {cluster} cluster")
        return members

    def remote(self) -> Ssh:
        if self.ssh is None:
            raise ValueError("this step runs on the members: give --ssh-config (a lab environment has its own)")
        return self.ssh


@dataclass
class MemberStatus:
    cluster: str
    name: str
    endpoint: str
    healthy: bool
    leader: bool = False
    member_id: str = ""
    cluster_id: str = ""
    raft_term: int = 0
    raft_index: int = 0
    revision: int = 0
    db_size: int = 0  # the backend file; what the quota counts
    db_size_in_use: int = 0  # what it holds: the rest is free pages only a defragmentation returns
    quota: int = 0  # --quota-backend-bytes: at it, etcd raises NOSPACE and takes no more writes
    alarms: list[str] = field(default_factory=list)  # NOSPACE, CORRUPT: raised on this member
    version: str = ""
    error: str = ""


def flags(plan: Plan, member: Member) -> dict[str, str]:
    """The member's etcd flags as rendered into its unit (the one place they are decided)."""
    return dict(f.removeprefix("--").split("=", 1) if "=" in f else (f.removeprefix("--"), "")
                for f in cloud_init.etcd_flags(plan, member))


def member_status(target: Target, m: Member) -> MemberStatus:
    c, url = target.client(), cloud_init.client_url(m)
    st = MemberStatus(m.role, m.name, url, healthy=c.health(url),
                      quota=int(flags(target.plan, m).get("quota-backend-bytes", 0)))
    try:
        s = c.status(url)
    except EtcdError as exc:
        st.healthy, st.error = False, str(exc)
        return st
    h = s.get("header", {})
    st.member_id, st.cluster_id = h.get("member_id", ""), h.get("cluster_id", "")
    st.leader = bool(s.get("leader")) and s.get("leader") == st.member_id
    st.raft_term, st.raft_index = int(s.get("raftTerm", 0)), int(s.get("raftIndex", 0))
    st.revision, st.db_size, st.version = int(h.get("revision", 0)), int(s.get("dbSize", 0)), s.get("version", "")
    st.db_size_in_use = int(s.get("dbSizeInUse", st.db_size))
    if not st.healthy:
        st.error = "not healthy (no leader, or a proposal did not commit)"
    return st


def status(target: Target, clusters: list[str]) -> list[MemberStatus]:
    """Every member of `clusters`, with the alarms its cluster has raised on it."""
    members = [m for cl in clusters for m in target.members(cl)]
    with ThreadPoolExecutor(max_workers=min(8, len(members))) as pool:
        rows = list(pool.map(lambda m: member_status(target, m), members))
    for cluster in clusters:
        mine = [r for r in rows if r.cluster == cluster]
        answering = next((r for r in mine if r.healthy), None)
        if answering is None:
            continue
        try:
            raised = target.client().alarms(answering.endpoint)
        except EtcdError:
            continue
        for r in mine:
            r.alarms = sorted(a.get("alarm", "?") for a in raised if a.get("memberID") == r.member_id)
    return rows


def healthy_endpoint(target: Target, cluster: str, exclude: str | None = None) -> str:
    for m in target.members(cluster):
        url = cloud_init.client_url(m)
        if m.name != exclude and target.client().health(url):
            return url
    raise EtcdError(f"no healthy member in the {cluster} cluster of {target.plan.env.name}")


def wait_healthy(target: Target, members: list[Member], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    pending = list(members)
    while pending and time.monotonic() < deadline:
        pending = [m for m in pending if not target.client().health(cloud_init.client_url(m))]
        if pending:
            time.sleep(1)
    if pending:
        raise EtcdError(f"not healthy after {timeout:.0f} s: {', '.join(m.name for m in pending)}")


# ----------------------------------------------------------------------------- defragmentation


@dataclass
class Defragmented:
    member: str
    before: int  # backend file size, bytes
    after: int
    was_leader: bool = False


def defragment(target: Target, cluster: str, say: Say = print) -> list[Defragmented]:
    """Defragment every member of `cluster`, one at a time, the leader last.

    A member serves nothing while it defragments, so: every member must be healthy before the first
    starts (with one down, the member being defragmented would take the quorum with it); each must be
    healthy again before the next; and the leader, last, first hands its leadership to a follower, so
    the cluster never waits on a busy leader. A NOSPACE alarm is disarmed at the end if every member
    is back under its quota (etcd's own recovery; with the data still over it, it is left raised)."""
    rows = status(target, [cluster])
    sick = [r for r in rows if not r.healthy]
    if sick:
        raise EtcdError(f"{', '.join(r.name for r in sick)} not healthy: defragmenting another member now could "
                        f"take the {cluster} quorum away; repair it first (`skyrack etcd status`)")
    members = {m.name: m for m in target.members(cluster)}
    order = [r for r in rows if not r.leader] + [r for r in rows if r.leader]
    c = target.client()
    done = []
    for row in order:
        m = members[row.name]
        now = member_status(target, m)
        if now.leader and len(members) > 1:
            follower = next(r for r in status(target, [cluster]) if not r.leader and r.healthy)
            c.move_leader(now.endpoint, follower.member_id)
            say(f"{m.name}: leadership handed to {follower.name}")
        say(f"{m.name}: defragmenting ({now.db_size:,} bytes, {now.db_size_in_use:,} in use)")
        c.defragment(now.endpoint)
        wait_healthy(target, [m])
        after = member_status(target, m)
        say(f"{m.name}: {now.db_size:,} -> {after.db_size:,} bytes, healthy")
        done.append(Defragmented(m.name, now.db_size, after.db_size, was_leader=row.leader))
    final = status(target, [cluster])
    nospace = [r for r in final if "NOSPACE" in r.alarms]
    if nospace and all(r.db_size < r.quota for r in final):
        for r in nospace:
            c.alarm_disarm(r.endpoint, r.member_id, "NOSPACE")
        say(f"NOSPACE disarmed on {', '.join(r.name for r in nospace)}: every member is under its quota again")
    return done


# ----------------------------------------------------------------------------- backups


def snapshot(target: Target, cluster: str, say: Say = print) -> backup.Snapshot:
    """Stream a snapshot from a healthy member straight into the backup container."""
    url = healthy_endpoint(target, cluster)
    rev = int(target.client().status(url)["header"]["revision"])
    c = backup.container(target.plan, target.blob_connection)
    name = backup.blob_name(target.plan, cluster)
    say(f"streaming a snapshot of {cluster} (revision {rev}) from {url} to {c.container_name}/{name}")
    return backup.upload(c, name, target.client(timeout=30).snapshot(url), rev)


def snapshots(target: Target, cluster: str) -> list[backup.Snapshot]:
    return backup.listing(backup.container(target.plan, target.blob_connection), f"{target.plan.env.name}/{cluster}/")


# etcdutl: etcd 3.6 restores with the offline tool only (etcdctl snapshot restore is gone)
RESTORE = """\
systemctl stop {unit}
rm -rf {data}.restore
etcdutl snapshot restore {file} --name {name} --initial-cluster {cluster} \\
  --initial-cluster-token {token} --initial-advertise-peer-urls {peer} --data-dir {data}.restore >/dev/null
rm -rf {data}.before-restore
if [ -d {data} ]; then mv {data} {data}.before-restore; fi
mv {data}.restore {data}
chown -R etcd:etcd {data}
rm -f {file}
"""


def restore(target: Target, cluster: str, name: str, say: Say = print) -> list[MemberStatus]:
    """Rebuild the whole cluster from snapshot `name` (or the newest, "latest"): every member stopped,
    restored, started together.

    Each member's previous data directory is kept beside it (`<data>.before-restore`)
    until the next restore. The result is a new cluster (new cluster ID) holding the
    snapshot's keys; clients (the API servers) reconnect to it by address.
    """
    ssh, members = target.remote(), target.members(cluster)
    # A token of its own: new member IDs, so a new cluster ID, and a member left out of the
    # restore (still on the old data) can never rejoin it.
    token = f"{flags(target.plan, members[0])['initial-cluster-token']}-restored-{time.strftime('%Y%m%dT%H%M%S')}"
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "snapshot.db"
        store = backup.container(target.plan, target.blob_connection)
        if name == "latest":
            found = backup.listing(store, f"{target.plan.env.name}/{cluster}/")
            if not found:
                raise ValueError(f"no snapshot of {cluster} in container {store.container_name}")
            name = found[-1].name  # names sort by time
        snap = backup.download(store, name, local)
        say(f"fetched {name} ({snap.size} bytes, SHA-256 checked)")

        def restore_one(m: Member) -> None:
            f = flags(target.plan, m)
            remote_file = "/var/lib/etcd/skyrack-restore.db"
            ssh.upload(m.name, local, remote_file)
            ssh.run(m.name, RESTORE.format(unit=UNIT, data=f["data-dir"], file=remote_file, name=f["name"],
                                           cluster=f["initial-cluster"], token=token,
                                           peer=f["initial-advertise-peer-urls"]))
            say(f"{m.name}: restored into {f['data-dir']} (previous data in {f['data-dir']}.before-restore)")

        with ThreadPoolExecutor(max_workers=len(members)) as pool:
            list(pool.map(restore_one, members))
    with ThreadPoolExecutor(max_workers=len(members)) as pool:  # together: each needs a quorum to start
        list(pool.map(lambda m: ssh.run(m.name, f"systemctl start --no-block {UNIT}"), members))
    wait_healthy(target, members)
    say(f"{cluster}: {len(members)} members healthy on the restored data")
    return status(target, [cluster])


# ----------------------------------------------------------------------------- replacing a member

REJOIN = """\
systemctl stop {unit}
if [ -d {data} ]; then mv {data} {data}.replaced-$(date +%Y%m%dT%H%M%S); fi
mkdir -p {dropin_dir}
cat > {dropin} <<'UNIT'
# Written by `skyrack etcd replace-member`: join the running cluster once, then removed.
[Service]
ExecStart=
ExecStart=/usr/bin/etcd {flags}
UNIT
systemctl daemon-reload
"""
REJOINED = "rm -f {dropin}\nrmdir --ignore-fail-on-non-empty $(dirname {dropin})\nsystemctl daemon-reload\n"


T = TypeVar("T")
RECONFIG_RETRY_SECONDS = 60.0


def reconfigure(fn: Callable[[], T], timeout: float = RECONFIG_RETRY_SECONDS) -> T:
    """A membership change, retried while etcd refuses it as "unhealthy cluster".

    etcd's strict reconfiguration check refuses a member add or remove until every member it
    would count on has been connected to the leader for a few seconds, so right after a leader
    change or a member's restart the refusal is transient; anything else is raised at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except EtcdError as exc:
            if "unhealthy cluster" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(2)


def replace_member(target: Target, cluster: str, name: str, say: Say = print) -> MemberStatus:
    """Replace member `name` with an empty one on the same machine (its data directory lost or damaged).

    1. stop etcd on it and move its data directory aside; 2. remove the old member and
    add the new one through a healthy member; 3. start etcd with
    `--initial-cluster-state=existing` (a one-time drop-in) so it joins and fetches the
    data from the leader; 4. once healthy, remove the drop-in (the data directory now
    exists, so the unit's `new` is ignored on later starts).
    """
    ssh = target.remote()
    member = next((m for m in target.members(cluster) if m.name == name), None)
    if member is None:
        raise ValueError(f"{name} is not a member of the {cluster} cluster of {target.plan.env.name}")
    f = flags(target.plan, member)
    peer_url = f["initial-advertise-peer-urls"]
    url = healthy_endpoint(target, cluster, exclude=name)
    c = target.client()
    dropin_flags = [fl if not fl.startswith("--initial-cluster-state=") else "--initial-cluster-state=existing"
                    for fl in cloud_init.etcd_flags(target.plan, member)]
    ssh.run(name, REJOIN.format(unit=UNIT, data=f["data-dir"], dropin=REJOIN_DROPIN,
                                dropin_dir=REJOIN_DROPIN.rsplit("/", 1)[0], flags=" ".join(dropin_flags)))
    say(f"{name}: etcd stopped, data directory moved aside")
    for old in c.members(url):
        if old.get("name") == name or peer_url in old.get("peerURLs", []):
            reconfigure(lambda old=old: c.member_remove(url, old["ID"]))
            say(f"removed member {old['ID']} ({name}) through {url}")
    new = reconfigure(lambda: c.member_add(url, peer_url))
    say(f"added {name} as member {new['ID']} ({peer_url})")
    ssh.run(name, f"systemctl start --no-block {UNIT}")
    wait_healthy(target, [member])
    ssh.run(name, REJOINED.format(dropin=REJOIN_DROPIN))
    say(f"{name}: joined and healthy; rejoin drop-in removed")
    return member_status(target, member)
