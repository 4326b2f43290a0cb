"""`skyrack check`: one passing and one failing case per rule, and the command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from skyrack import plan as planmod
from skyrack.policies import check, rules
from support import run_cli

Edit = Callable[[dict[str, Any]], None]


@pytest.fixture
def dev(env_copy) -> Callable[..., Path]:
    """configs/dev.yaml copied, edited, its lock rewritten: returns the file's path."""

    def make(*edits: Edit) -> Path:
        path = env_copy("dev")
        data = yaml.safe_load(path.read_text())
        for edit in edits:
            edit(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        planmod.write_lock(planmod.make(path, require_lock=False))
        return path

    return make


def findings(path: Path, rule: str) -> list[check.Finding]:
    return [f for f in check.run(planmod.make(path)) if f.rule == rule]


def production(d: dict[str, Any]) -> None:
    d["tier"] = "production"


def test_every_rule_is_tested_here():
    ids = {r.id for r in check.RULES}
    assert ids == {case[0] for case in CASES} | {"pod-range-fits-pods"}  # the last: its own test below


CASES = [
    # rule, edits that pass, edits that fail, (field, words of the message) of the failure
    ("production-etcd-quorum", [production],
     [production, lambda d: d["azure"].update(zones=["1", "2"])], ("azure.zones", "span 2 zone(s)")),
    ("production-etcd-quorum", [lambda d: d["control_plane"]["etcd"].update(count=1)],
     [production, lambda d: d["control_plane"]["etcd"].update(count=1)], ("control_plane.etcd.count", "1 member")),
    ("production-apiserver-redundancy", [production, lambda d: d["control_plane"]["apiservers"].update(count=2)],
     [production, lambda d: d["control_plane"]["apiservers"].update(count=1)],
     ("control_plane.apiservers.count", "1 API server")),
    ("etcd-isolated", [lambda d: d["azure"].update(admin_cidrs=["10.1.0.0/16"])],
     [lambda d: d["azure"].update(admin_cidrs=["10.0.0.0/16"])],
     ("azure.admin_cidrs[0]", "includes the etcd subnet 10.0.0.48/28")),
    ("apiserver-not-public", [lambda d: d["azure"].update(admin_cidrs=["203.0.0.0/16"])],
     [lambda d: d["azure"].update(admin_cidrs=["203.0.113.0/24", "0.0.0.0/0"])],
     ("azure.admin_cidrs[1]", "the whole internet")),
    ("apiserver-not-public", [], [lambda d: d["azure"].update(admin_cidrs=["8.0.0.0/8"])],
     ("azure.admin_cidrs[0]", "16,777,216 addresses")),
    ("gpu-quota-within-racks", [lambda d: d["teams"][0].update(gpu_quota=32)],
     [lambda d: d["teams"][0].update(gpu_quota=33)], ("teams[0].gpu_quota", "can be scheduled on 32")),
    ("kubernetes-mirror-matches-version",
     [lambda d: d["mirrors"].update(kubernetes="https://mirror.example.org/kubernetes/v1.31/deb/")],
     [lambda d: d["mirrors"].update(kubernetes="https://mirror.example.org/kubernetes/v1.31/deb/"),
      lambda d: d["kubernetes"].update(version="1.32.0")], ("mirrors.kubernetes", "serves 1.31 packages")),
    ("kubernetes-version-supported", [lambda d: d["kubernetes"].update(version="1.30.0")],
     [lambda d: d["kubernetes"].update(version="1.29.9")], ("kubernetes.version", "outside the supported window")),
]


@pytest.mark.parametrize(("rule", "good", "bad", "expected"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_passes_and_fails(dev, rule: str, good: list[Edit], bad: list[Edit], expected: tuple[str, str]):
    assert findings(dev(*good), rule) == []
    found = findings(dev(*bad), rule)
    assert len(found) >= 1 and found[0].field == expected[0] and expected[1] in found[0].message, found
    assert found[0].severity == "error" and found[0].fix


def test_pod_range_too_small_for_pods_per_node(dev):
    path = dev()
    assert findings(path, "pod-range-fits-pods") == []
    lock = path.with_name("dev.lock.yaml")
    data = yaml.safe_load(lock.read_text())
    data["nodes"]["r01-n02"] = "10.128.0.64/28"  # hand-edited: 16 addresses for 32 pods
    lock.write_text(yaml.safe_dump(data))
    # the lock is verified against the environment before any rule runs: `check` refuses it, naming the lock
    proc = run_cli("check", str(path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "dev.lock.yaml: nodes.r01-n02: 10.128.0.64/28 is not a /26" in proc.stderr, proc.stderr


def test_the_stack_settings_repository_must_serve_the_version_too(dev):
    """dev names its apt repository in configs/Pulumi.dev.yaml (no mirrors.kubernetes): an upgrade must move it."""
    path = dev()
    stack = path.with_name("Pulumi.dev.yaml")
    stack.write_text("config:\n  skyrack:kubernetesAptRepo: https://pkgs.k8s.io/core:/stable:/v1.31/deb/\n")
    assert findings(path, "kubernetes-mirror-matches-version") == []
    upgraded = dev(lambda d: d["kubernetes"].update(version="1.32.0"))
    assert upgraded == path
    (found,) = findings(path, "kubernetes-mirror-matches-version")
    assert found.field == "Pulumi.dev.yaml: skyrack:kubernetesAptRepo" and "serves 1.31 packages" in found.message
    stack.write_text("config: [not, a, mapping\n")  # Pulumi's own error; the rule reads what it can
    assert findings(path, "kubernetes-mirror-matches-version") == []


def test_the_version_window_is_defined_once():
    lo, hi = rules.KUBERNETES_MINORS
    assert rules.kubernetes_version_problem(f"1.{lo}.0") is None
    assert rules.kubernetes_version_problem(f"1.{hi + 1}.0") is not None


def test_shipped_configs_pass_the_check():
    proc = run_cli("check", "configs/lab.yaml", "configs/dev.yaml", "configs/prod.yaml", "configs/prod.lock.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("0 error(s)") == 3 and "prod (production)" in proc.stdout


def test_cli_failure_exit_1_and_json(dev):
    path = dev(lambda d: d["azure"].update(admin_cidrs=["0.0.0.0/0"]))
    proc = run_cli("check", str(path))
    assert proc.returncode == 1
    assert "error   apiserver-not-public: azure.admin_cidrs[0]:" in proc.stdout and "fix:" in proc.stdout
    data = json.loads(run_cli("check", str(path), "--json").stdout)
    assert data["ok"] is False
    ids = [f["rule"] for f in data["results"][0]["findings"]]
    assert ids == ["etcd-isolated", "apiserver-not-public"]  # 0.0.0.0/0 contains etcd's subnet too


def test_cli_invalid_file_exit_1(tmp_path: Path):
    bad = tmp_path / "x.yaml"
    bad.write_text("name: x\n")
    proc = run_cli("check", str(bad))
    assert proc.returncode == 1 and "azure: required but missing" in proc.stderr
