"""skyrack-etcd-disk as rendered for an Azure member, run against stand-ins for blkid, lsblk, mkfs and mount
that record what they were asked: it finds its own disk by label, formats only a blank one, and refuses
rather than touch a disk holding something else (a reallocated VM's disks are not always in the same order)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from etcd_files import install, member_files

from skyrack.render import cloud_init

TOOLS = ("blkid", "lsblk", "mkfs.ext4", "mount", "mountpoint", "mkdir", "chown", "chmod")
# One stand-in for every tool: answers from $FAKE_DISKS ({device: {"fs": TYPE, "label": LABEL}}), records calls.
FAKE = r'''#!PYTHON
import json, os, sys
tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
disks = json.loads(os.environ["FAKE_DISKS"])
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(json.dumps([tool, *args]) + "\n")
if tool == "mountpoint":
    sys.exit(1)  # nothing is mounted yet
if tool == "blkid" and "-t" in args:
    label = args[args.index("-t") + 1].split("=", 1)[1]
    found = [d for d, v in disks.items() if v.get("label") == label]
    print(found[0]) if found else sys.exit(2)
elif tool == "blkid" and "-p" in args:
    what, dev = args[args.index("-s") + 1], args[-1]
    value = disks.get(dev, {}).get("fs" if what == "TYPE" else "pttype")
    print(value) if value else sys.exit(2)
elif tool == "lsblk":
    print(os.path.basename(args[-1]) if args[1] == "NAME" else "")
'''


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    _, _, files = member_files()
    d = tmp_path_factory.mktemp("disk")
    (d / "bin").mkdir()
    for tool in TOOLS:
        install(d / "bin" / tool, FAKE.replace("PYTHON", sys.executable, 1))
    return install(d / "skyrack-etcd-disk", files["/usr/local/sbin/skyrack-etcd-disk"])


def run(script: Path, tmp_path: Path, disks: dict) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    calls = tmp_path / "calls"
    env = {**os.environ, "PATH": f"{script.parent / 'bin'}:{os.environ['PATH']}", "SKYRACK_DISKS": " ".join(disks),
           "FAKE_DISKS": json.dumps(disks), "FAKE_CALLS": str(calls)}
    proc = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=60)
    return proc, [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def formatted(calls):
    return [c[-1] for c in calls if c[0] == "mkfs.ext4"]


def mounted(calls):
    return [c[-2:] for c in calls if c[0] == "mount"]


def test_its_own_disk_is_found_by_label_wherever_it_appears(script, tmp_path):
    proc, calls = run(script, tmp_path, {"/dev/nvme0n1": {}, "/dev/nvme1n1": {"fs": "ext4", "label": "etcd-data"}})
    assert proc.returncode == 0, proc.stderr
    assert formatted(calls) == [] and mounted(calls) == [["/dev/nvme1n1", "/var/lib/etcd"]]


def test_only_a_blank_disk_is_formatted(script, tmp_path):
    proc, calls = run(script, tmp_path, {"/dev/nvme0n1": {"fs": "xfs", "label": "scratch"},
                                         "/dev/nvme1n1": {"pttype": "gpt"}, "/dev/nvme2n1": {}})
    assert proc.returncode == 0, proc.stderr
    assert formatted(calls) == ["/dev/nvme2n1"] and mounted(calls) == [["/dev/nvme2n1", "/var/lib/etcd"]]
    assert ["mkfs.ext4", "-q", "-L", cloud_init.ETCD_DISK_LABEL, "/dev/nvme2n1"] in calls


def test_disks_that_hold_something_else_are_refused_not_formatted(script, tmp_path):
    proc, calls = run(script, tmp_path, {"/dev/nvme0n1": {"fs": "ext4", "label": "other"}})
    assert proc.returncode == 1 and "refusing to run etcd" in proc.stderr
    assert formatted(calls) == [] and mounted(calls) == []
