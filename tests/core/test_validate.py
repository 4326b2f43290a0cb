"""`skyrack validate`: every bad input is rejected with exit 1 and a message naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from support import CONFIGS, rejects, run_cli


def write_env(tmp_path: Path, mutate, base: str = "dev", name: str | None = None) -> Path:
    data = yaml.safe_load((CONFIGS / f"{base}.yaml").read_text())
    mutate(data)
    path = tmp_path / f"{name or data.get('name', base)}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("env", ["lab", "dev", "prod"])
def test_shipped_environments_are_valid(env: str) -> None:
    proc = run_cli("validate", f"configs/{env}.yaml")
    assert proc.returncode == 0, proc.stderr
    assert f"configs/{env}.yaml: valid" in proc.stdout


def test_unknown_key_is_named_with_a_suggestion(tmp_path: Path) -> None:
    def typo(d):
        d["kubernetes"]["pods_per_nod"] = d["kubernetes"].pop("pods_per_node")

    rejects(write_env(tmp_path, typo), "dev.yaml: kubernetes.pods_per_nod: unknown key (did you mean 'pods_per_node'?)")


def test_wrong_type(tmp_path: Path) -> None:
    def wrong(d):
        d["control_plane"]["apiservers"]["count"] = "three"

    rejects(write_env(tmp_path, wrong), "control_plane.apiservers.count: ")


def test_duplicate_node_name_and_ip_name_the_first_use(tmp_path: Path) -> None:
    def dup(d):
        d["racks"][0]["nodes"].append({"name": "r01-n02", "ip": "10.67.0.11"})

    err = rejects(write_env(tmp_path, dup),
                  "racks[0].nodes[4].name: r01-n02 is already used by racks[0].nodes[1]",
                  "racks[0].nodes[4].ip: 10.67.0.11 is already used by racks[0].nodes[0]")
    assert err.count("error") == 2, "both problems are reported in one run"


def test_duplicates_inside_a_compact_range_are_found(tmp_path: Path) -> None:
    def overlap(d):
        d["racks"].append({"name": "r02", "team": "robotics",
                           "node_range": {"count": 4, "first_ip": "10.67.0.13", "name": "r02-n{index:02d}"}})

    rejects(write_env(tmp_path, overlap), "racks[1].node_range(r02-n01).ip: 10.67.0.13 is already used by racks[0].nodes[2]")


def test_node_outside_onprem_cidrs(tmp_path: Path) -> None:
    def outside(d):
        d["racks"][0]["nodes"][0]["ip"] = "10.200.0.5"

    rejects(write_env(tmp_path, outside), "racks[0].nodes[0].ip: 10.200.0.5 is outside onprem.cidrs (10.64.0.0/14)")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("service", "10.1.0.0/16", "kubernetes.service_cidr: 10.1.0.0/16 overlaps azure.vnet_cidr"),
    ("pod", "10.64.0.0/10", "onprem.cidrs[0]: 10.64.0.0/14 overlaps kubernetes.pod_cidr (10.64.0.0/10)"),
    ("onprem", "10.96.0.0/14", "onprem.cidrs[0]: 10.96.0.0/14 overlaps kubernetes.service_cidr"),
    ("vnet", "10.192.0.0/16", "kubernetes.pod_cidr: 10.192.0.0/12 overlaps azure.vnet_cidr (10.192.0.0/16)"),
])
def test_overlapping_cidrs(tmp_path: Path, field: str, value: str, message: str) -> None:
    def overlap(d):
        if field == "service":
            d["kubernetes"]["service_cidr"] = value
        elif field == "pod":
            d["kubernetes"]["pod_cidr"] = value
        elif field == "onprem":
            d["onprem"]["cidrs"] = [value]
            d["racks"][0]["nodes"] = [{"name": "r01-n01", "ip": "10.96.1.1"}]
        else:
            d["azure"]["vnet_cidr"] = value

    rejects(write_env(tmp_path, overlap), message)


@pytest.mark.parametrize(("certificates", "message"), [
    ({"validity_minutes": 60, "renew_before_minutes": 60},
     "kubernetes.certificates: renew_before_minutes (60) must be less than validity_minutes (60)"),
    ({"validity_minutes": 2}, "kubernetes.certificates.validity_minutes: Input should be greater than or equal to 5"),
    ({"renew_before_minutes": 0},
     "kubernetes.certificates.renew_before_minutes: Input should be greater than or equal to 1"),
    ({"validity_minutes": "1y"}, "kubernetes.certificates.validity_minutes: Input should be a valid integer"),
])
def test_bad_certificate_lifetimes(tmp_path: Path, certificates: dict, message: str) -> None:
    def bad(d):
        d["kubernetes"]["certificates"] = certificates

    rejects(write_env(tmp_path, bad), message)


@pytest.mark.parametrize(("count", "word"), [(4, "even"), (9, "out of range")])
def test_bad_etcd_count(tmp_path: Path, count: int, word: str) -> None:
    def bad(d):
        d["control_plane"]["etcd"]["count"] = count

    rejects(write_env(tmp_path, bad), f"control_plane.etcd.count: {count} is {word}: etcd needs 1, 3, 5 or 7 members")


def test_pod_cidr_too_small_for_the_nodes(tmp_path: Path) -> None:
    def small(d):
        d["kubernetes"]["pod_cidr"] = "10.128.0.0/20"  # 64 ranges of /26; 4 nodes + 100 pool nodes need 104

    rejects(write_env(tmp_path, small),
            "kubernetes.pod_cidr: 10.128.0.0/20 holds 64 /26 node ranges but 104 nodes need one")


def test_rack_with_unknown_team(tmp_path: Path) -> None:
    def unknown(d):
        d["racks"][0]["team"] = "robotic"

    rejects(write_env(tmp_path, unknown), "racks[0].team: unknown team 'robotic' (teams: robotics)")


def test_vnet_too_small_for_its_subnets(tmp_path: Path) -> None:
    def small(d):
        d["azure"]["vnet_cidr"] = "10.0.0.0/26"

    rejects(write_env(tmp_path, small), "azure.vnet_cidr: 10.0.0.0/26 is too small")


def test_name_must_match_the_file(tmp_path: Path) -> None:
    def rename(d):
        d["name"] = "staging"

    rejects(write_env(tmp_path, rename, name="dev"), "dev.yaml: name: 'staging' does not match the file name 'dev'")


def test_cidr_with_host_bits(tmp_path: Path) -> None:
    def host_bits(d):
        d["azure"]["vnet_cidr"] = "10.0.0.1/16"

    rejects(write_env(tmp_path, host_bits), "azure.vnet_cidr: '10.0.0.1/16' is not an IPv4 network")


def test_unparsable_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "dev.yaml"
    path.write_text("name: dev\nazure:\n  location: [westus2\n")
    rejects(path, "dev.yaml: line 4, column 1: invalid YAML")


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    path = tmp_path / "dev.yaml"
    path.write_text((CONFIGS / "dev.yaml").read_text() + "name: dev\n")
    rejects(path, "key 'name' appears twice (first on line 2)")


def test_missing_file(tmp_path: Path) -> None:
    rejects(tmp_path / "nope.yaml", "nope.yaml: no such file")


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    def many(d):
        d["racks"][0]["team"] = "nobody"
        d["racks"][0]["nodes"][1]["ip"] = "192.0.2.1"
        d["kubernetes"]["service_cidr"] = "10.1.0.0/16"

    err = rejects(write_env(tmp_path, many), "racks[0].team: unknown team", "racks[0].nodes[1].ip: 192.0.2.1 is outside",
                  "kubernetes.service_cidr: 10.1.0.0/16 overlaps")
    assert err.count("error") == 3


def test_schema_errors_are_all_listed_too(tmp_path: Path) -> None:
    def many(d):
        d["control_plane"]["etcd"]["count"] = 2
        d["azure"]["zones"] = ["1", "4"]
        del d["kubernetes"]["pod_cidr"]

    rejects(write_env(tmp_path, many), "control_plane.etcd.count: 2 is even", "azure.zones[1]:",
            "kubernetes.pod_cidr: required but missing")


def test_json_output_lists_problems(tmp_path: Path) -> None:
    def bad(d):
        d["control_plane"]["etcd"]["count"] = 4

    proc = run_cli("validate", "--json", str(write_env(tmp_path, bad)))
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False
    assert doc["problems"][0]["path"] == "control_plane.etcd.count"


def test_usage_error_exits_2() -> None:
    proc = run_cli("validate", "--no-such-flag")
    assert proc.returncode == 2


def test_lab_kubernetes_version_must_be_one_the_lab_builds(tmp_path: Path) -> None:
    path = write_env(tmp_path, lambda d: d["kubernetes"].update(version="1.32.9"), base="lab")
    rejects(path, "kubernetes.version: 1.32.9 is not a version the lab builds from source",
            "known to build: 1.36.3, 1.37.2")


def test_lab_images_must_be_the_ones_it_builds(tmp_path: Path) -> None:
    path = write_env(tmp_path, lambda d: d["cluster"]["versions"].update(
        coredns="registry.k8s.io/coredns/coredns:v1.12.0", prometheus="quay.io/prometheus/prometheus:v2.55.1"),
        base="lab")
    rejects(path, "cluster.versions.coredns: the lab builds registry.k8s.io/coredns/coredns:v1.14.6",
            "cluster.versions.prometheus: the lab builds quay.io/prometheus/prometheus:v3.16.0")


def test_the_default_prometheus_is_the_release_the_site_builds() -> None:
    """An environment that names no Prometheus runs the one skyrack builds (lab) and pins (dev, prod)."""
    from skyrack import upstream
    from skyrack.config.schema import Versions

    assert [upstream.prometheus_release(v) for v in ("v0.316.0", "v0.300.1", "v0.55.1")] == \
        ["3.16.0", "3.0.1", "2.55.1"]
    assert Versions().prometheus == upstream.PROMETHEUS_IMAGE
    for env in ("dev", "prod"):
        pinned = yaml.safe_load((CONFIGS / f"{env}.yaml").read_text())["cluster"]["versions"]["prometheus"]
        assert pinned == upstream.PROMETHEUS_IMAGE, env


def test_lab_containerd_and_etcd_must_be_the_ones_it_builds(tmp_path: Path) -> None:
    path = write_env(tmp_path, lambda d: (d["kubernetes"].update(containerd="2.3.7"),
                                          d["control_plane"]["etcd"].update(version="3.6.15")), base="lab")
    rejects(path, "kubernetes.containerd: the lab builds 2.4.2, not 2.3.7; set that",
            "control_plane.etcd.version: the lab builds 3.6.16, not 3.6.15; set that")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["control_plane"]["etcd"].update(version="3.4.23"),
     "control_plane.etcd.version: etcd 3.4.23 is older than 3.5.24, the oldest external etcd kubeadm accepts"),
    (lambda d: d["kubernetes"].update(containerd="1.7.24"), "kubernetes.containerd: String should match pattern"),
    (lambda d: d["cluster"]["versions"].update(scheduler_plugins="registry.k8s.io/scheduler-plugins/kube-scheduler:v0.31.8"),
     "cluster.versions.scheduler_plugins: no longer a setting: gang scheduling is kube-scheduler's own"),
    (lambda d: d["cluster"].update(gang_permit_wait_seconds=60),
     "cluster.gang_permit_wait_seconds: no longer a setting: kube-scheduler's GangScheduling has a fixed permit"),
])
def test_runtime_versions_and_retired_keys_are_refused_with_the_reason(tmp_path: Path, edit, message) -> None:
    rejects(write_env(tmp_path, edit), message)


@pytest.mark.parametrize("url", ["198.18.0.1:5000", "http://", "http://mirror/ v2", "ftp://mirror"])
def test_registry_mirror_must_be_a_url(tmp_path: Path, url: str) -> None:
    path = write_env(tmp_path, lambda d: d.setdefault("mirrors", {}).update(registry=url))
    rejects(path, "mirrors.registry")


@pytest.mark.parametrize(("value", "message"), [
    ("169.254.169.254", "kubernetes.node_dns_ip: 169.254.169.254 is not a usable link-local address"),
    ("10.96.0.10", "kubernetes.node_dns_ip: 10.96.0.10 is not a usable link-local address"),
    ("169.254.20", "kubernetes.node_dns_ip: '169.254.20' is not an IPv4 address"),
    (16909060, "kubernetes.node_dns_ip: expected an IPv4 address as a string"),
])
def test_a_node_dns_address_that_could_leave_the_node_or_hit_a_cloud_service_is_refused(tmp_path: Path, value,
                                                                                          message) -> None:
    rejects(write_env(tmp_path, lambda d: d["kubernetes"].update(node_dns_ip=value)), message)
