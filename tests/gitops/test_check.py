"""`skyrack check`: one passing and one failing case per rule, and the command line."""

from __future__ import annotations

import datetime as dt
import itertools
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
TODAY = dt.date(2026, 12, 2)  # the day every rule is run on here: no test depends on the clock


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


def findings(path: Path, rule: str, today: dt.date = TODAY) -> list[check.Finding]:
    return [f for f in check.run(planmod.make(path), today) if f.rule == rule]


def production(d: dict[str, Any]) -> None:
    d["tier"] = "production"


def test_every_rule_is_tested_here():
    ids = {r.id for r in check.RULES}
    assert ids == {case[0] for case in CASES} | {"pod-range-fits-pods", "environments-disjoint"}  # their own below


CASES = [
    # rule, edits that pass, edits that fail, (field, words of the message) of the failure
    ("mirrors-https", [production, lambda d: d["mirrors"].update(apt_proxy="https://pkgs.example.org:3142")],
     [production, lambda d: d["mirrors"].update(apt_proxy="http://pkgs.example.org:3142")],
     ("mirrors.apt_proxy", "http://pkgs.example.org:3142 is plain HTTP")),
    ("production-etcd-quorum", [production],
     [production, lambda d: d["azure"].update(zones=["1", "2"])], ("azure.zones", "span 2 zone(s)")),
    ("production-etcd-quorum", [lambda d: d["control_plane"]["etcd"].update(count=1)],
     [production, lambda d: d["control_plane"]["etcd"].update(count=1)], ("control_plane.etcd.count", "1 member")),
    ("production-apiserver-redundancy", [production, lambda d: d["control_plane"]["apiservers"].update(count=2)],
     [production, lambda d: d["control_plane"]["apiservers"].update(count=1)],
     ("control_plane.apiservers.count", "1 API server")),
    ("etcd-isolated", [lambda d: d["azure"].update(admin_cidrs=["10.0.0.0/16"])],
     [lambda d: d["azure"].update(admin_cidrs=["10.1.0.0/16"])],
     ("azure.admin_cidrs[0]", "includes the etcd subnet 10.1.0.48/28")),
    ("apiserver-not-public", [lambda d: d["azure"].update(admin_cidrs=["203.0.0.0/16"])],
     [lambda d: d["azure"].update(admin_cidrs=["203.0.113.0/24", "0.0.0.0/0"])],
     ("azure.admin_cidrs[1]", "the whole internet")),
    ("apiserver-not-public", [], [lambda d: d["azure"].update(admin_cidrs=["8.0.0.0/8"])],
     ("azure.admin_cidrs[0]", "16,777,216 addresses")),
    ("gpu-quota-within-racks", [lambda d: d["teams"][0].update(gpu_quota=32)],
     [lambda d: d["teams"][0].update(gpu_quota=33)], ("teams[0].gpu_quota", "can be scheduled on 32")),
    ("kubernetes-mirror-matches-version",
     [lambda d: d["mirrors"].update(kubernetes="https://mirror.example.org/kubernetes/v1.37/deb/")],
     [lambda d: d["mirrors"].update(kubernetes="https://mirror.example.org/kubernetes/v1.37/deb/"),
      lambda d: d["kubernetes"].update(version="1.38.0")], ("mirrors.kubernetes", "serves 1.37 packages")),
    ("racks-declare-hardware", [production], [production, lambda d: d["racks"][0].pop("hardware")],
     ("racks[0].hardware", "rack r01 declares no hardware")),
    ("kubernetes-version-supported", [production, lambda d: d["kubernetes"].update(version="1.37.2")],
     [production, lambda d: d["kubernetes"].update(version="1.31.2")],
     ("kubernetes.version", "reached its end of life on 2025-10-28")),
]


@pytest.mark.parametrize(("rule", "good", "bad", "expected"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_passes_and_fails(dev, rule: str, good: list[Edit], bad: list[Edit], expected: tuple[str, str]):
    assert findings(dev(*good), rule) == []
    found = findings(dev(*bad), rule)
    assert len(found) >= 1 and found[0].field == expected[0] and expected[1] in found[0].message, found
    assert found[0].severity == "error" and found[0].fix


def test_environments_beside_each_other_route_nothing_twice(env_copy, dev):
    """dev beside prod at one site (onprem.cidrs overlap): every range routed there is its own, and its VPN peer."""
    env_copy("prod")
    path = dev()
    assert findings(path, "environments-disjoint") == []  # the shipped pair: disjoint
    prod = yaml.safe_load(path.with_name("prod.yaml").read_text())
    first_prod_node = prod["racks"][1]["node_range"]["first_ip"]  # r002's

    def shared(d: dict[str, Any]) -> None:  # what the shipped dev was before this rule
        d["azure"]["vnet_cidr"], d["kubernetes"]["pod_cidr"] = prod["azure"]["vnet_cidr"], "10.128.0.0/12"
        d["onprem"]["vpn"] = dict(prod["onprem"]["vpn"])
        d["racks"][0]["nodes"][1]["ip"] = first_prod_node

    got = {f.field: f.message for f in findings(dev(shared), "environments-disjoint")}
    assert set(got) == {"azure.vnet_cidr", "kubernetes.pod_cidr", "racks[0]", "onprem.vpn.peer_ip"}, got
    assert got["azure.vnet_cidr"].startswith("10.0.0.0/16 overlaps prod's azure.vnet_cidr (prod.yaml"), got
    assert "10.128.0.0/12 overlaps prod's kubernetes.pod_cidr" in got["kubernetes.pod_cidr"]
    assert got["racks[0]"].startswith(f"racks[0].nodes[1] {first_prod_node} overlaps prod's racks[1].node_range("
                                      "r002-n01)"), got
    assert "one on-prem device would serve two Azure gateways" in got["onprem.vpn.peer_ip"]
    # the other side sees it too
    assert {f.field for f in findings(path.with_name("prod.yaml"), "environments-disjoint")} >= {"azure.vnet_cidr"}
    # pods of one environment in the other's VNet: routed at the same site all the same
    got = findings(dev(lambda d: d["kubernetes"].update(pod_cidr="10.0.128.0/17")), "environments-disjoint")
    assert [(f.field, "overlaps prod's azure.vnet_cidr" in f.message) for f in got] == [("kubernetes.pod_cidr", True)]


def test_environments_at_different_sites_may_reuse_ranges(env_copy, dev):
    """The lab (its own bridge) and an environment at another site share nothing that is routed together."""
    env_copy("prod")
    path = dev(lambda d: d["onprem"].update(cidrs=["172.16.0.0/14"], vpn={"peer_ip": "198.51.100.10"}),
               lambda d: d["azure"].update(vnet_cidr="10.0.0.0/16"),
               lambda d: [n.update(ip=f"172.16.1.{11 + i}") for i, n in enumerate(d["racks"][0]["nodes"])])
    got = findings(path, "environments-disjoint")
    # one device for both: the same site after all, so the reused VNet counts too
    assert [f.field for f in got] == ["azure.vnet_cidr", "onprem.vpn.peer_ip"], got
    path = dev(lambda d: d["onprem"].update(cidrs=["172.16.0.0/14"], vpn={"peer_ip": "198.51.100.99"}),
               lambda d: d["azure"].update(vnet_cidr="10.0.0.0/16"),
               lambda d: [n.update(ip=f"172.16.1.{11 + i}") for i, n in enumerate(d["racks"][0]["nodes"])])
    assert findings(path, "environments-disjoint") == []
    # a file beside it that is no environment (or a broken one) is not a neighbour: its own check reports it
    path.with_name("notes.yaml").write_text("just: [a, list]\n")
    assert findings(path, "environments-disjoint") == []


def test_pod_range_too_small_for_pods_per_node(dev):
    path = dev()
    assert findings(path, "pod-range-fits-pods") == []
    lock = path.with_name("dev.lock.yaml")
    data = yaml.safe_load(lock.read_text())
    data["nodes"]["r01-n02"] = "10.192.0.64/28"  # hand-edited: 16 addresses for 32 pods
    lock.write_text(yaml.safe_dump(data))
    # the lock is verified against the environment before any rule runs: `check` refuses it, naming the lock
    proc = run_cli("check", str(path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "dev.lock.yaml: nodes.r01-n02: 10.192.0.64/28 is not a /26" in proc.stderr, proc.stderr


def test_the_stack_settings_repository_must_serve_the_version_too(dev):
    """dev names its apt repository in configs/Pulumi.dev.yaml (no mirrors.kubernetes): an upgrade must move it."""
    path = dev()
    stack = path.with_name("Pulumi.dev.yaml")
    stack.write_text("config:\n  skyrack:kubernetesAptRepo: https://pkgs.k8s.io/core:/stable:/v1.37/deb/\n")
    assert findings(path, "kubernetes-mirror-matches-version") == []
    upgraded = dev(lambda d: d["kubernetes"].update(version="1.38.0"))
    assert upgraded == path
    (found,) = findings(path, "kubernetes-mirror-matches-version")
    assert found.field == "Pulumi.dev.yaml: skyrack:kubernetesAptRepo" and "serves 1.37 packages" in found.message
    stack.write_text("config: [not, a, mapping\n")  # Pulumi's own error; the rule reads what it can
    assert findings(path, "kubernetes-mirror-matches-version") == []


def test_the_release_calendar_is_upstreams():
    table = rules.KUBERNETES_RELEASES
    assert sorted(table) == list(range(30, 39)) and all(table[m].minor == m for m in table)
    released = [table[m] for m in range(30, 38)]
    assert all(r.released and r.end_of_life for r in released)
    for r, following in itertools.pairwise(released):
        assert r.released < following.released and r.end_of_life < following.end_of_life
        assert 13 * 30 < (r.end_of_life - r.released).days < 15 * 31, r  # about 14 months of patches
    assert (table[30].released, table[30].end_of_life) == (dt.date(2024, 4, 17), dt.date(2025, 6, 28))
    assert (table[37].released, table[37].end_of_life) == (dt.date(2026, 8, 19), dt.date(2027, 10, 28))
    assert (table[38].released, table[38].end_of_life) == (None, None)  # planned for 2026-12: not released
    assert rules.newest_supported_minor(TODAY) == table[37]
    assert rules.newest_supported_minor(dt.date(2026, 8, 18)) == table[36]  # the day before 1.37's release


MOVE = "move to 1.37 (the newest minor in support, until 2027-10-28)"
VERSION_CASES = [
    # tier, version, day, expected (severity, message) or None
    ("production", "1.37.2", TODAY, None),
    ("production", "1.35.0", TODAY, None),  # its end of life (2027-02-28) is 88 days away
    ("production", "1.32.13", TODAY,
     ("error", f"1.32.13: Kubernetes 1.32 (released 2024-12-11) reached its end of life on 2026-02-28: "
               f"no more patches, security fixes included; {MOVE}")),
    ("staging", "1.34.1", TODAY,
     ("error", f"1.34.1: Kubernetes 1.34 (released 2025-08-27) reached its end of life on 2026-10-27: "
               f"no more patches, security fixes included; {MOVE}")),
    ("dev", "1.32.13", TODAY,
     ("warning", f"1.32.13: Kubernetes 1.32 (released 2024-12-11) reached its end of life on 2026-02-28: "
                 f"no more patches, security fixes included; {MOVE}")),
    ("lab", "1.31.2", TODAY,
     ("warning", f"1.31.2: Kubernetes 1.31 (released 2024-08-13) reached its end of life on 2025-10-28: "
                 f"no more patches, security fixes included; {MOVE}")),
    ("production", "1.34.1", dt.date(2026, 10, 27), (  # the end of life is the last supported day
        "warning", "1.34.1: Kubernetes 1.34 reaches its end of life on 2026-10-27 (today): plan the upgrade; "
                   "move to 1.37 (the newest minor in support, until 2027-10-28)")),
    ("production", "1.38.0", TODAY,
     ("error", f"1.38.0: Kubernetes 1.38 is not released yet (as of 2026-12-02); {MOVE}")),
    ("production", "1.37.0", dt.date(2026, 8, 18),
     ("error", "1.37.0: Kubernetes 1.37 is not released until 2026-08-19 (as of 2026-08-18); "
               "move to 1.36 (the newest minor in support, until 2027-06-28)")),
    ("dev", "1.38.0", TODAY,
     ("warning", f"1.38.0: Kubernetes 1.38 is not released yet (as of 2026-12-02); {MOVE}")),
    ("production", "1.35.4", dt.date(2027, 1, 15),
     ("warning", f"1.35.4: Kubernetes 1.35 reaches its end of life on 2027-02-28 (in 44 day(s)): plan the upgrade; "
                 f"{MOVE}")),
    ("dev", "1.35.4", dt.date(2027, 1, 15),
     ("warning", f"1.35.4: Kubernetes 1.35 reaches its end of life on 2027-02-28 (in 44 day(s)): plan the upgrade; "
                 f"{MOVE}")),
    ("production", "1.35.4", dt.date(2026, 12, 30),  # 60 days before: the first day of the warning
     ("warning", f"1.35.4: Kubernetes 1.35 reaches its end of life on 2027-02-28 (in 60 day(s)): plan the upgrade; "
                 f"{MOVE}")),
    ("production", "1.35.4", dt.date(2026, 12, 29), None),  # 61 days before
    ("production", "1.37.2", dt.date(2027, 9, 1),  # the newest minor near its end of life: nothing to move to yet
     ("warning", "1.37.2: Kubernetes 1.37 reaches its end of life on 2027-10-28 (in 57 day(s)): plan the upgrade; "
                 "no newer minor is released yet: watch for one")),
    ("production", "1.29.9", TODAY,
     ("error", f"1.29.9: Kubernetes 1.29 is not in skyrack's release table (1.30 to 1.38), its support dates are "
               f"unknown; {MOVE}")),
    ("production", "1.99.0", TODAY,
     ("error", f"1.99.0: Kubernetes 1.99 is not in skyrack's release table (1.30 to 1.38), its support dates are "
               f"unknown; {MOVE}")),
    ("lab", "1.29.9", TODAY,
     ("warning", f"1.29.9: Kubernetes 1.29 is not in skyrack's release table (1.30 to 1.38), its support dates are "
                 f"unknown; {MOVE}")),
    ("production", "1.37.2", dt.date(2027, 10, 29),  # a table nobody updated: the message says so
     ("error", "1.37.2: Kubernetes 1.37 (released 2026-08-19) reached its end of life on 2027-10-28: no more "
               "patches, security fixes included; no minor in skyrack's release table is supported on 2027-10-29: "
               "add upstream's newer minors to KUBERNETES_RELEASES (policies/rules.py)")),
]


@pytest.mark.parametrize(("tier", "version", "day", "expected"), VERSION_CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in VERSION_CASES])
def test_kubernetes_version_against_the_release_calendar(dev, tier: str, version: str, day: dt.date,
                                                         expected: tuple[str, str] | None):
    path = dev(lambda d: d.update(tier=tier), lambda d: d["kubernetes"].update(version=version))
    found = [(f.field, f.severity, f.message) for f in findings(path, "kubernetes-version-supported", day)]
    assert found == ([("kubernetes.version", *expected)] if expected else []), found


def test_a_warning_does_not_fail_the_check(dev):
    """dev on a minor past its end of life (for any day the check runs): reported, exit 0."""
    path = dev(lambda d: d["kubernetes"].update(version="1.31.2"))
    proc = run_cli("check", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 error(s), 1 warning(s)" in proc.stdout
    assert "warning kubernetes-version-supported: kubernetes.version: 1.31.2: Kubernetes 1.31" in proc.stdout
    data = json.loads(run_cli("check", str(path), "--json").stdout)
    assert data["ok"] is True and data["results"][0]["ok"] is True
    assert [(f["rule"], f["severity"]) for f in data["results"][0]["findings"]] == [
        ("kubernetes-version-supported", "warning")]


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
