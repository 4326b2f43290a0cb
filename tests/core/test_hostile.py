"""Hostile input, class by class: refused with `file: field: message`, exit 1, no traceback, nothing changed.

The classes are issue #14's: values that would be templates, lock files that lie, file names that
would overwrite another environment's lock, files that are not files, ranges and types that only
look valid, amplification, and output that would drive the terminal.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from skyrack import config, files
from skyrack import plan as planmod
from skyrack.errors import InputError
from support import CONFIGS, ROOT, run_cli


def copy_env(tmp_path: Path, name: str = "dev") -> Path:
    d = tmp_path / "configs"
    d.mkdir(exist_ok=True)
    for suffix in (".yaml", ".lock.yaml"):
        shutil.copy(CONFIGS / f"{name}{suffix}", d / f"{name}{suffix}")
    return d / f"{name}.yaml"


def edited(tmp_path: Path, mutate, name: str = "dev") -> Path:
    path = copy_env(tmp_path, name)
    data = yaml.safe_load(path.read_text())
    mutate(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refused(*args: str, fragments: tuple[str, ...] = ()) -> str:
    proc = run_cli(*args)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, f"{fragment!r} not in:\n{proc.stderr}"
    return proc.stderr


# ----------------------------------------------------------------------------- values that would be templates

HOSTILE = "{{ lookup('pipe', 'touch /tmp/pwned') }}"


@pytest.mark.parametrize(("section", "key", "value"), [
    ("mirrors", "apt_proxy", f"http://mirror/{HOSTILE}"),
    ("mirrors", "apt_proxy", 'http://mirror:3142";\nAcquire::http::Proxy "http://evil'),
    ("mirrors", "apt_proxy", "http://user:password@mirror:3142"),
    ("mirrors", "kubernetes", f"https://pkgs.k8s.io/{HOSTILE}"),
    ("mirrors", "kubernetes", "file://relative/path"),
    ("mirrors", "registry", f"http://198.18.0.1:5000/{HOSTILE}"),
    ("mirrors", "registry", "http://198.18.0.1:99999"),
    ("kubernetes", "cluster_domain", HOSTILE),
    ("kubernetes", "cluster_domain", "cluster.local\n"),
])
def test_values_that_reach_ansible_are_what_they_claim_to_be(tmp_path, section, key, value):
    path = edited(tmp_path, lambda d: d.setdefault(section, {}).update({key: value}))
    refused("validate", str(path), fragments=(f"{path}: {section}.{key}: ",))


@pytest.mark.parametrize(("field", "value"), [
    ("team", HOSTILE), ("gpu.model", HOSTILE), ("name", "r01\n"),
])
def test_rack_values_are_labels(tmp_path, field, value):
    def bad(d):
        target = d["racks"][0]
        *parents, last = field.split(".")
        for p in parents:
            target = target[p]
        target[last] = value
    refused("validate", str(edited(tmp_path, bad)), fragments=(f"racks[0].{field}:",))


def test_real_mirror_urls_still_pass(tmp_path):
    path = edited(tmp_path, lambda d: d["mirrors"].update(
        apt_proxy="http://apt-proxy.lab.internal:3142", kubernetes="https://pkgs.k8s.io/core:/stable:/v1.31/deb/",
        registry="http://198.18.0.1:5000"))
    assert run_cli("validate", str(path)).returncode == 0


# ----------------------------------------------------------------------------- file names and the lock path


def test_an_editor_backup_never_rewrites_the_real_lock(tmp_path):
    path = copy_env(tmp_path)
    backup = path.with_name("dev.yaml~")
    data = yaml.safe_load(path.read_text())
    data["racks"][0]["nodes"].insert(0, {"name": "r01-n00", "ip": "10.64.1.9"})
    backup.write_text(yaml.safe_dump(data))
    lock_before = path.with_name("dev.lock.yaml").read_text()
    refused("plan", str(backup), fragments=(f"{backup}: name: an environment file is named dev.yaml, not 'dev.yaml~'",))
    assert path.with_name("dev.lock.yaml").read_text() == lock_before
    assert sorted(p.name for p in path.parent.iterdir()) == ["dev.lock.yaml", "dev.yaml", "dev.yaml~"]


@pytest.mark.parametrize("name", ["dev.copy.yaml", "dev.yml"])
def test_a_second_file_cannot_claim_an_environment(tmp_path, name):
    path = copy_env(tmp_path)
    other = path.with_name(name)
    data = yaml.safe_load(path.read_text())
    data["racks"][0]["nodes"].pop(0)  # a plan of it would release a range in dev's lock
    other.write_text(yaml.safe_dump(data))
    lock = path.with_name("dev.lock.yaml").read_text()
    for command in ("validate", "plan"):
        refused(command, str(other), fragments=(f"{other}: name: ",))
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(["dev.lock.yaml", "dev.yaml", name])
    assert path.with_name("dev.lock.yaml").read_text() == lock


# ----------------------------------------------------------------------------- the lock is verified


def lock_edit(path: Path, mutate) -> Path:
    lock = path.with_name("dev.lock.yaml")
    data = yaml.safe_load(lock.read_text())
    mutate(data)
    lock.write_text(yaml.safe_dump(data, sort_keys=False))
    return lock


@pytest.mark.parametrize(("mutate", "fragment"), [
    (lambda d: d["nodes"].update({"r01-n02": d["nodes"]["r01-n01"]}), "overlaps the range of nodes.r01-n0"),
    (lambda d: d["nodes"].update({"r01-n02": "10.0.0.0/26"}), "nodes.r01-n02: 10.0.0.0/26 is outside kubernetes.pod_cidr"),
    (lambda d: d["nodes"].update({"r01-n02": "10.192.0.0/25"}), "nodes.r01-n02: 10.192.0.0/25 is not a /26"),
    (lambda d: d["nodes"].update({"r01-n02": next(iter(d["pools"].values())).split("/")[0] + "/26"}),
     "overlaps the range of "),
    (lambda d: d["nodes"].update({"r01-n02": "not-a-cidr"}), "nodes.r01-n02: 'not-a-cidr' is not a pod range"),
    (lambda d: d.update(extra=1), "extra: unknown key in a lock file"),
    (lambda d: d.update(nodes=["r01-n01"]), "nodes: expected a mapping"),
])
@pytest.mark.parametrize("command", [["plan", "--locked"], ["plan"], ["inventory"]], ids=" ".join)
def test_a_lock_that_lies_is_refused_naming_the_lock(tmp_path, mutate, fragment, command):
    path = copy_env(tmp_path)
    lock = lock_edit(path, mutate)
    before = lock.read_text()
    refused(*command, str(path), fragments=(f"{lock}: ", fragment))
    assert lock.read_text() == before, "a refused lock is left as it was"


def test_a_duplicate_key_in_the_lock_is_refused(tmp_path):
    path = copy_env(tmp_path)
    lock = path.with_name("dev.lock.yaml")
    lock.write_text(lock.read_text() + "  r01-n01: 10.192.0.128/26\n")
    refused("plan", "--locked", str(path), fragments=(f"{lock}: ", "key 'r01-n01' appears twice"))


def test_a_lock_that_is_a_directory_or_not_utf8(tmp_path):
    path = copy_env(tmp_path)
    lock = path.with_name("dev.lock.yaml")
    lock.write_bytes(b"version: 1\n\xff\xfe\n")
    refused("plan", str(path), fragments=(f"{lock}: not UTF-8 text",))
    lock.unlink()
    lock.mkdir()
    refused("plan", str(path), fragments=(f"{lock}: cannot read: is a directory",))


# ----------------------------------------------------------------------------- atomic lock writes


def grown(tmp_path: Path) -> Path:
    path = copy_env(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["racks"][0]["nodes"].append({"name": "r01-n05", "ip": "10.67.0.15"})
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("failing", ["fsync", "mkstemp", "replace"])
def test_a_failed_lock_write_changes_nothing_and_leaves_nothing(tmp_path, monkeypatch, failing):
    path = grown(tmp_path)
    lock = path.with_name("dev.lock.yaml")
    before = lock.read_text()
    p = planmod.make(path, require_lock=False)

    def broken(*_a, **_k):
        raise OSError(errno.ENOSPC if failing == "fsync" else errno.EACCES, "injected")

    target = {"fsync": (os, "fsync"), "mkstemp": (files.tempfile, "mkstemp"), "replace": (os, "replace")}[failing]
    monkeypatch.setattr(*target, broken)
    with pytest.raises(InputError) as exc:
        planmod.write_lock(p)
    assert str(exc.value).startswith(f"{lock}: cannot write: ")
    monkeypatch.undo()
    assert lock.read_text() == before
    assert sorted(x.name for x in path.parent.iterdir()) == ["dev.lock.yaml", "dev.yaml"]


def test_a_full_disk_is_a_message_not_a_traceback(tmp_path):
    """In a subprocess, the real CLI: fsync fails as on a full disk."""
    path = grown(tmp_path)
    code = ("import errno, os, sys; from skyrack import cli\n"
            "def full(fd): raise OSError(errno.ENOSPC, 'No space left on device')\n"
            f"os.fsync = full; sys.argv = ['skyrack', 'plan', {str(path)!r}]; cli.main()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "modules"), "COLUMNS": "200"}, check=False)
    assert proc.returncode == 1, proc.stderr
    assert f"{path.with_name('dev.lock.yaml')}: cannot write: No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(x.name for x in path.parent.iterdir()) == ["dev.lock.yaml", "dev.yaml"]


def test_concurrent_plans_write_one_whole_lock(tmp_path):
    path = grown(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-m", "skyrack", "plan", str(path)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "modules")}) for _ in range(6)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
    assert sorted(x.name for x in path.parent.iterdir()) == ["dev.lock.yaml", "dev.yaml"]
    assert run_cli("plan", "--locked", str(path)).returncode == 0


# ----------------------------------------------------------------------------- files that are not files


def test_things_that_are_not_environment_files(tmp_path):
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(tmp_path / "loop2.yaml")
    (tmp_path / "loop2.yaml").symlink_to(loop)
    long = tmp_path / ("a" * 300 + ".yaml")
    for path, fragment in ((loop, "cannot read: Too many levels of symbolic links"),
                           (long, "cannot read: File name too long"),
                           (Path("/dev/zero"), "larger than"),
                           (tmp_path, "cannot read: is a directory")):
        for command in ("validate", "plan", "inventory"):
            refused(command, str(path), fragments=(f"{path}: {fragment}",))


def test_outputs_files_that_are_not_json(tmp_path):
    outputs = tmp_path / "outputs.json"
    outputs.write_bytes(b"\xff\xfe{}")
    refused("inventory", "--outputs", str(outputs), "configs/dev.yaml", fragments=(f"{outputs}: not UTF-8 text",))
    outputs.write_text("[" * 100_000)
    refused("inventory", "--outputs", str(outputs), "configs/dev.yaml", fragments=(f"{outputs}: ",))


# ----------------------------------------------------------------------------- ranges and types that only look valid


@pytest.mark.parametrize(("mutate", "fragment"), [
    (lambda d: d["control_plane"]["etcd"].update(count=True), "control_plane.etcd.count: Input should be a valid integer"),
    (lambda d: d["control_plane"]["apiservers"].update(count="3"), "control_plane.apiservers.count:"),
    (lambda d: d["kubernetes"].update(pods_per_node=32.0), "kubernetes.pods_per_node:"),
    (lambda d: d["control_plane"]["etcd"].update(events_cluster="yes"), "control_plane.etcd.events_cluster:"),
    (lambda d: d["kubernetes"].update(service_cidr="10.96.0.0/32"), "kubernetes.service_cidr: 10.96.0.0/32 is too small"),
    (lambda d: d["kubernetes"].update(service_cidr="10.96.0.0/29"), "must hold the API service IP (10.96.0.1)"),
    (lambda d: d["azure"].update(vnet_cidr="127.0.0.0/16"), "azure.vnet_cidr: 127.0.0.0/16 is in the loopback"),
    (lambda d: d["kubernetes"].update(pod_cidr="224.0.0.0/10"), "kubernetes.pod_cidr: 224.0.0.0/10 is in the multicast"),
    (lambda d: d["kubernetes"].update(pod_cidr="169.254.0.0/16"), "kubernetes.pod_cidr: 169.254.0.0/16 is in the link-local"),
    (lambda d: d["azure"].update(vnet_cidr="240.0.0.0/16"), "azure.vnet_cidr: 240.0.0.0/16 is in the reserved"),
    (lambda d: d["azure"].update(admin_cidrs=["127.0.0.1/32"]), "azure.admin_cidrs[0]: 127.0.0.1/32 is in the loopback"),
    (lambda d: d["onprem"].update(vpn={"peer_ip": "0.0.0.0"}), "onprem.vpn.peer_ip: 0.0.0.0 is a 'this network'"),
    (lambda d: d["onprem"].update(vpn={"peer_ip": "255.255.255.255"}), "onprem.vpn.peer_ip: 255.255.255.255 is a reserved"),
    (lambda d: d["onprem"].update(cidrs=["0.0.0.0/0"]), "onprem.cidrs[0]: 0.0.0.0/0 is in the 'this network'"),
    (lambda d: d["control_plane"]["apiservers"].update(vm_size="[/]"), "control_plane.apiservers.vm_size:"),
    (lambda d: d["kubernetes"].update(version="1.\u0663\u0661.2"), "kubernetes.version:"),  # Arabic-Indic digits
])
def test_values_that_only_look_valid(tmp_path, mutate, fragment):
    refused("validate", str(edited(tmp_path, mutate)), fragments=(fragment,))


@pytest.mark.parametrize(("pattern", "fragment"), [
    ("{rack}-n{index:02d}\n", "bad name pattern"),
    ("{rack}-n{index:>100000000}", "field {index}"),
    ("{rack.__class__}-{index}", "field {rack.__class__}"),
    ("{rack}-{index!r}", "field {index}"),
    ("{rack}-node", "it has no {index}"),
    ("{rack}-n{index:02d}-{0}", "field {0}"),
    ("{rack}-N{index}", "'-N'"),
])
def test_name_patterns_are_whole_and_bounded(tmp_path, pattern, fragment):
    def compact(d):
        d["racks"][0]["nodes"] = []
        d["racks"][0]["node_range"] = {"count": 4, "first_ip": "10.67.0.11", "name": pattern}
    path = edited(tmp_path, compact)
    refused("validate", str(path), fragments=("racks[0].node_range.name: ", fragment))


def test_a_pattern_whose_names_are_too_long(tmp_path):
    def compact(d):
        d["racks"][0]["nodes"] = []
        d["racks"][0]["node_range"] = {"count": 4, "first_ip": "10.67.0.11", "name": "{rack}-" + "n" * 60 + "{index}"}
    refused("validate", str(edited(tmp_path, compact)), fragments=("is not a DNS-1123 label",))


# ----------------------------------------------------------------------------- amplification


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path):
    path = copy_env(tmp_path)
    bomb = "".join(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 9) + "]\n" for i in range(1, 10))
    text = path.read_text().replace("racks:\n", "racks:\n", 1)
    path.write_text("x0: &x0 [r]\n" + bomb + text)
    proc = run_cli("validate", str(path), timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "YAML nodes (aliases included)" in proc.stderr
    assert len(proc.stderr) < 2000


def test_a_recursive_alias_and_deep_nesting(tmp_path):
    path = tmp_path / "dev.yaml"
    path.write_text("name: dev\nracks: &r [*r]\n")
    refused("validate", str(path), fragments=(f"{path}: line 2: invalid YAML: a recursive alias",))
    path.write_text("name: " + "[" * 5000 + "]" * 5000 + "\n")
    refused("validate", str(path), fragments=(f"{path}: ",))


def test_anchors_and_merge_keys_still_work(tmp_path):
    path = copy_env(tmp_path)
    text = path.read_text().replace("racks:\n", "x-rack: &rack {team: robotics}\nracks:\n", 1)
    path.write_text(text.replace("x-rack", "xrack"))
    refused("validate", str(path), fragments=(f"{path}: xrack: unknown key",))  # the anchor parses; the key is unknown
    data = yaml.safe_load((CONFIGS / "dev.yaml").read_text())
    rack = data["racks"][0]
    lines = ["base: &base", *(f"  {k}: {v!r}" for k, v in rack.items() if k != "nodes")]
    merged = "\n".join(lines) + "\nracks:\n  - <<: *base\n    nodes: " + repr(rack["nodes"]).replace("'", '"') + "\n"
    body = {k: v for k, v in data.items() if k != "racks"}
    path.write_text(yaml.safe_dump(body, sort_keys=False) + merged)
    err = refused("validate", str(path), fragments=(f"{path}: base: unknown key",))
    assert err.count("error") == 1, "the merged rack itself is valid"


def test_too_many_nodes_are_refused_without_expanding_them(tmp_path):
    def huge(d):
        d["racks"] = [{"name": f"r{i:03d}", "node_range": {"count": 4096, "first_ip": "10.64.0.1",
                                                           "name": f"r{i:03d}-{{index}}"}} for i in range(6)]
    refused("validate", str(edited(tmp_path, huge)),
            fragments=(f"racks: 24,576 on-prem nodes: more than the {config.MAX_NODES:,}",))


def test_many_problems_are_capped(tmp_path):
    def dupes(d):
        d["racks"][0]["nodes"] = [{"name": "r01-n01", "ip": "10.67.0.11"}] * 1000
    err = refused("validate", str(edited(tmp_path, dupes)), fragments=("more problems not shown",))
    assert err.count("\n") <= config.MAX_PROBLEMS + 1


# ----------------------------------------------------------------------------- exit codes and the terminal


def test_an_internal_error_exits_3_not_1():
    code = ("import sys; from skyrack import cli, plan\n"
            "def bug(*a, **k): raise ZeroDivisionError('a bug')\n"
            "plan.make = bug; sys.argv = ['skyrack', 'plan', 'configs/dev.yaml']; cli.main()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "modules"), "COLUMNS": "200"}, check=False)
    assert proc.returncode == 3
    assert proc.stderr.splitlines() == ["internal error ZeroDivisionError: a bug (a bug in skyrack, not a verdict on "
                                        "the input; SKYRACK_DEBUG=1 shows the traceback)"]


def test_markup_and_control_characters_are_printed_as_text(tmp_path):
    (tmp_path / "[").mkdir()
    path = tmp_path / "[" / "]dev\x1b[2J\u202e.yaml"  # the path reads ".../[/]dev...": a Rich closing tag
    proc = run_cli("validate", str(path))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"error {tmp_path}/[/]dev\\x1b[2J\\u202e.yaml: no such file"]
    env = edited(tmp_path, lambda x: x["control_plane"]["apiservers"].update(vm_size="[/]\x1b]0;pwn\x07"))
    err = refused("validate", str(env), fragments=("control_plane.apiservers.vm_size:",))
    assert "\x1b" not in err and "\x07" not in err


def test_printed_plan_escapes_what_it_shows(tmp_path):
    d = tmp_path / "[" / "][red]dir"
    d.mkdir(parents=True)
    for suffix in (".yaml", ".lock.yaml"):
        shutil.copy(CONFIGS / f"dev{suffix}", d / f"dev{suffix}")
    proc = run_cli("plan", str(d / "dev.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert f"({d / 'dev.yaml'})" in proc.stdout and f"Lock {d / 'dev.lock.yaml'}: up to date" in proc.stdout
