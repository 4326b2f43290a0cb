"""The members' snapshot timer: rendered from the stack's container, leader-only, managed identity.

The script is the one in the member's real user-data (from the stack run under mocks); it runs
here with stand-ins for etcdctl (leader or not, a snapshot file) and curl (the metadata
service's token; Blob service requests recorded), pointed at them (and at a small block size) by SKYRACK_* variables.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
from pathlib import Path

import yaml
from pulumi_harness import StackRun

FAKE_ETCDCTL = r"""#!/bin/sh
case "$*" in
  *"endpoint status -w json"*)  # etcd 3.6.16's own output; the leader is this member or another
    if [ "$LEADER" = true ]; then leader=17910470452546088492; else leader=3483985597799689630; fi
    echo '[{"Endpoint":"https://127.0.0.1:2379","Status":{"header":{"cluster_id":17011032012771536916,'\
'"member_id":17910470452546088492,"revision":4242,"raft_term":2},"version":"3.6.16","dbSize":3014656,'\
'"leader":'"$leader"',"raftIndex":2068,"raftTerm":2,"raftAppliedIndex":2068,"dbSizeInUse":1236992,'\
'"storageVersion":"3.6.0","dbSizeQuota":2147483648,"downgradeInfo":{}}}]' ;;
  *"snapshot save"*) for a in "$@"; do f=$a; done; head -c 700 /dev/zero | tr '\0' 's' > "$f" ;;
esac
"""
FAKE_CURL = r"""#!/bin/sh
printf '%s\n' "$*" >> "$CALLS"
for a in "$@"; do case "$a" in @*) cat "${a#@}" >> "$BODIES"; echo >> "$BODIES" ;; esac; done
case "$*" in *metadata/identity*) echo '{"access_token": "mi-token", "expires_in": "3599"}' ;; esac
"""


def etcd_files(stack: StackRun, name: str = "etcd-0") -> dict[str, str]:
    vm = stack.one("compute:VirtualMachine", name).plain
    config = yaml.safe_load(base64.b64decode(vm["osProfile"]["customData"]))
    assert ["systemctl", "enable", "--now", "skyrack-etcd-snapshot.timer"] in config["runcmd"]
    return {f["path"]: f["content"] for f in config["write_files"]}


def run(tmp_path: Path, script: str, leader: bool, block_bytes: str = "268435456") -> tuple[list[str], str, str]:
    for tool, text in (("etcdctl", FAKE_ETCDCTL), ("curl", FAKE_CURL)):
        (tmp_path / tool).write_text(text)
        (tmp_path / tool).chmod(0o755)
    calls, bodies = tmp_path / "calls", tmp_path / "bodies"
    calls.touch()
    bodies.touch()
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60, env={
        "PATH": "/usr/bin:/bin", "SKYRACK_ETCDCTL": str(tmp_path / "etcdctl"), "SKYRACK_CURL": str(tmp_path / "curl"),
        "SKYRACK_SNAPSHOT_DIR": str(tmp_path / "work"), "SKYRACK_BLOCK_BYTES": block_bytes, "LEADER": "true" if leader else "false",
        "CALLS": str(calls), "BODIES": str(bodies)})
    assert proc.returncode == 0, proc.stderr
    return calls.read_text().splitlines(), bodies.read_text(), proc.stdout


def test_every_member_has_the_timer_for_the_stacks_container(stack: StackRun) -> None:
    url = stack.outputs["backup_container_url"]
    for vm in stack.of_type("compute:VirtualMachine"):
        if not vm.name.startswith("etcd"):
            continue
        files = etcd_files(stack, vm.name)
        script = files["/usr/local/sbin/skyrack-etcd-snapshot"]
        assert f"CONTAINER={url}\n" in script
        role = vm.name.rsplit("-", 1)[0]
        assert f'/{stack.name}/{role}/$(date' in script  # <env>/<cluster>/<time>.db, as `skyrack etcd` names them
        timer = files["/etc/systemd/system/skyrack-etcd-snapshot.timer"]
        assert "OnUnitActiveSec=60min" in timer  # backups.interval_minutes (default)


def test_the_leader_uploads_in_blocks_with_its_managed_identity(tmp_path, dev: StackRun) -> None:
    script = etcd_files(dev)["/usr/local/sbin/skyrack-etcd-snapshot"]
    assert "BLOCK_BYTES=${SKYRACK_BLOCK_BYTES:-268435456}" in script  # 256 MiB blocks on a member
    calls, bodies, out = run(tmp_path, script, leader=True, block_bytes="300")  # 700 bytes: three blocks
    token, *blocks, commit = calls
    assert "Metadata:true" in token and "resource=https%3A%2F%2Fstorage.azure.com%2F" in token
    assert len(blocks) == 3
    url = dev.outputs["backup_container_url"]
    for b in [*blocks, commit]:
        assert "Authorization: Bearer mi-token" in b and "x-ms-version: 2021-08-06" in b and f" {url}/dev/etcd/" in b
        assert "SharedKey" not in b and "sig=" not in b  # shared keys are disabled on the account
    assert all("comp=block&blockid=" in b for b in blocks) and "comp=blocklist" in commit
    sha = hashlib.sha256(b"s" * 700).hexdigest()
    assert f"x-ms-meta-sha256: {sha}" in commit and "x-ms-meta-revision: 4242" in commit
    assert bodies.count("<Latest>") == 3 and "s" * 300 in bodies
    assert "revision 4242" in out
    assert not (tmp_path / "work").exists()  # the local copy is removed


def test_a_follower_uploads_nothing(tmp_path, dev: StackRun) -> None:
    calls, _, out = run(tmp_path, etcd_files(dev)["/usr/local/sbin/skyrack-etcd-snapshot"], leader=False)
    assert calls == [] and "not the leader" in out
