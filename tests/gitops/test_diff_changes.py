"""`skyrack diff`: every kind of change and its risk, on real git repositories."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from gitops_helpers import GitRepo, find, only


def test_nothing_changed_is_reported_as_unchanged(repo: GitRepo):
    report = repo.diff()
    assert {e.name: e.status for e in report.envs} == {"dev": "unchanged", "lab": "unchanged"}
    assert report.exit_code == 0 and not report.changes


# ----------------------------------------------------------------------------- racks and nodes


def test_nodes_added_to_a_rack_and_a_new_rack_are_info_grouped_by_rack(repo: GitRepo):
    def grow(d: dict[str, Any]) -> None:
        d["racks"][0]["nodes"].append({"name": "r01-n05", "ip": "10.67.0.15"})
        d["racks"].append({"name": "r03", "team": "robotics", "gpu": {"model": "H100-SXM5-80GB", "count": 8},
                           "node_range": {"count": 64, "first_ip": "10.64.3.10"}})
        d["teams"][0]["gpu_quota"] = 32 + 8 + 512

    repo.edit("dev", grow)
    changes = only(repo.diff())
    rack = find(changes, "rack r03 added")
    assert rack.risk == "info" and len(rack.nodes) == 64 and rack.nodes[0] == "r03-n01"
    assert "512 GPUs" in rack.message
    one = find(changes, "rack r01: 1 node added")
    assert one.risk == "info" and one.nodes == ("r01-n05",)
    assert repo.diff().exit_code == 0


def test_nodes_and_racks_removed_are_caution(repo: GitRepo):
    def shrink(d: dict[str, Any]) -> None:
        d["racks"][0]["nodes"].pop()
        d["racks"].pop()  # r02

    repo.edit("dev", shrink)
    changes = only(repo.diff())
    assert find(changes, "rack r02 removed").risk == "caution"
    assert "16 GPUs" in find(changes, "rack r02 removed").message
    removed = find(changes, "rack r01: 1 node")
    assert removed.risk == "caution" and removed.nodes == ("r01-n04",)


def test_node_moved_between_racks_and_teams_is_caution(repo: GitRepo):
    def move(d: dict[str, Any]) -> None:
        node = d["racks"][0]["nodes"].pop()
        d["racks"][1]["nodes"].append(node)

    repo.edit("dev", move)
    change = find(only(repo.diff()), "moved from rack r01 to r02")
    assert change.risk == "caution" and change.nodes == ("r01-n04",)
    assert "team robotics → vision" in change.message


def test_rack_given_to_another_team_is_caution(repo: GitRepo):
    repo.edit("dev", lambda d: d["racks"][1].update(team="robotics"))
    change = find(only(repo.diff()), "from team vision to robotics")
    assert change.risk == "caution" and change.nodes == ("r02-n01", "r02-n02")
    assert change.field == "racks[1].team"


def test_readdressed_node_is_caution(repo: GitRepo):
    repo.edit("dev", lambda d: d["racks"][0]["nodes"][1].update(ip="10.64.1.99"))
    change = find(only(repo.diff()), "re-addressed")
    assert change.risk == "caution" and change.nodes == ("r01-n02",)


def test_pod_range_of_an_existing_node_changing_is_danger(repo: GitRepo):
    lock = repo.configs / "dev.lock.yaml"
    data = yaml.safe_load(lock.read_text())
    data["nodes"]["r01-n01"], data["nodes"]["r01-n02"] = data["nodes"]["r01-n02"], data["nodes"]["r01-n01"]
    lock.write_text(yaml.safe_dump(data))
    report = repo.diff()
    change = find(only(report), "different pod range")
    assert change.risk == "danger" and change.nodes == ("r01-n01", "r01-n02")
    assert report.exit_code == 1


def test_gpu_model_change_is_reported(repo: GitRepo):
    repo.edit("dev", lambda d: d["racks"][1]["gpu"].update(model="B200"))
    change = find(only(repo.diff()), "GPUs 8 × H100-SXM5-80GB → 8 × B200")
    assert change.risk == "info" and len(change.nodes) == 2


def test_stale_lock_at_head_is_caution(repo: GitRepo):
    repo.edit("dev", lambda d: d["racks"][0]["nodes"].append({"name": "r01-n05", "ip": "10.67.0.15"}), lock=False)
    assert find(only(repo.diff()), "lock file is out of date").risk == "caution"


# ----------------------------------------------------------------------------- control plane


def cp(d: dict[str, Any]) -> dict[str, Any]:
    return d["control_plane"]


@pytest.mark.parametrize(("edit", "text", "risk"), [
    (lambda d: cp(d)["apiservers"].update(count=5), "API servers 3 → 5", "caution"),
    (lambda d: cp(d)["apiservers"].update(vm_size="Standard_E16s_v5"), "rolling replacement", "caution"),
    (lambda d: cp(d)["etcd"].update(count=5), "etcd 3 → 5 members: a membership change", "danger"),
    (lambda d: cp(d)["etcd"].update(vm_size="Standard_L16s_v3"), "replace them one at a time (`pulumi up --replace`", "danger"),
    (lambda d: cp(d)["etcd"].update(events_cluster=True), "separate etcd cluster for events", "caution"),
    (lambda d: cp(d)["etcd"].update(quota_backend_gib=16), "backend quota 8 → 16 GiB", "caution"),
    (lambda d: d["azure"].update(zones=["1", "2"]), "etcd members change zone (etcd-2 3 → 1)", "danger"),
], ids=["apiserver-count", "apiserver-size", "etcd-count", "etcd-size", "events-on", "etcd-quota", "zones"])
def test_control_plane_changes(repo: GitRepo, edit, text: str, risk: str):
    repo.edit("dev", edit)
    assert find(only(repo.diff()), text).risk == risk


def test_more_nodes_resize_auto_sized_api_servers(repo: GitRepo):
    """A pool growing to 1,000 nodes: the consequence, not the field, is what matters."""
    repo.edit("dev", lambda d: d["cloud_pools"][0].update(max=1000))
    changes = only(repo.diff())
    resize = find(changes, "API-server VMs Standard_E8s_v5 → Standard_E32s_v5")  # > 500 nodes: 32 vCPUs
    assert resize.risk == "caution" and "sized for 106 → 1,006 nodes" in resize.message
    assert find(changes, "cpu: 0 to 100 → 0 to 1000 nodes").risk == "info"
    # the pool outgrows its pod range (its subnet): a new range, every node of the pool re-created
    assert find(changes, "cloud pool cpu: pod range 10.207.224.0/19 →").risk == "danger"


# ----------------------------------------------------------------------------- network, VPN, versions


@pytest.mark.parametrize(("edit", "text", "risk"), [
    (lambda d: d["azure"].update(vnet_cidr="10.2.0.0/16"), "vnet_cidr 10.1.0.0/16 → 10.2.0.0/16", "danger"),
    (lambda d: d["kubernetes"].update(service_cidr="10.112.0.0/12"), "every Service's cluster IP", "danger"),
    (lambda d: d["kubernetes"].update(pod_cidr="10.192.0.0/10"), "every node's pod range moves", "danger"),
    (lambda d: d["kubernetes"].update(pods_per_node=64), "from /26 to /25", "danger"),
    (lambda d: d["kubernetes"].update(pods_per_node=30), "--max-pods", "caution"),
    (lambda d: d["azure"]["admin_cidrs"].append("198.51.100.0/24"), "widens access", "caution"),
    (lambda d: d["azure"]["admin_cidrs"].append("0.0.0.0/0"), "the whole internet", "danger"),
    (lambda d: d["azure"].update(admin_cidrs=[]), "narrows access", "info"),
    (lambda d: d["onprem"]["cidrs"].append("172.16.0.0/16"), "on-prem range 172.16.0.0/16 added", "caution"),
    (lambda d: d["onprem"].update(cidrs=["10.64.0.0/16", "10.67.0.0/16"]), "on-prem range 10.64.0.0/14 removed",
     "danger"),
    (lambda d: d["kubernetes"].update(node_dns_ip="169.254.53.53"),
     "applies to new pods only: running pods keep the old address", "danger"),
], ids=["vnet", "service", "pod", "pods-per-node-block", "pods-per-node", "admin-add", "admin-internet",
        "admin-remove", "onprem-add", "onprem-remove", "node-dns"])
def test_network_changes(repo: GitRepo, edit, text: str, risk: str):
    repo.edit("dev", edit)
    assert find(only(repo.diff()), text).risk == risk


@pytest.mark.parametrize(("edit", "text", "risk"), [
    (lambda d: d["onprem"].pop("vpn"), "the VPN is removed", "danger"),
    (lambda d: d["onprem"]["vpn"].update(peer_ip="198.51.100.30"), "VPN peer 198.51.100.20 → 198.51.100.30", "danger"),
    (lambda d: d["onprem"]["vpn"].update(asn=65020), "BGP", "caution"),
], ids=["removed", "peer", "bgp"])
def test_vpn_changes(repo: GitRepo, edit, text: str, risk: str):
    repo.edit("dev", edit)
    assert find(only(repo.diff()), text).risk == risk


def test_vpn_added_is_caution(repo: GitRepo):
    repo.edit("dev", lambda d: d["onprem"].pop("vpn"))
    base = repo.commit("no vpn")
    repo.edit("dev", lambda d: d["onprem"].update(vpn={"peer_ip": "198.51.100.10"}))
    assert find(only(repo.diff(base)), "a VPN gateway to 198.51.100.10 is created").risk == "caution"


@pytest.mark.parametrize(("version", "text", "risk"), [
    ("1.37.3", "patch upgrade", "caution"),
    ("1.38.0", "Kubernetes upgrade 1.37.2 → 1.38.0", "caution"),
    ("1.39.0", "skips 1 minor version", "danger"),
    ("1.36.9", "downgrade", "danger"),
])
def test_kubernetes_version_changes(repo: GitRepo, version: str, text: str, risk: str):
    repo.edit("dev", lambda d: d["kubernetes"].update(version=version))
    assert find(only(repo.diff()), text).risk == risk


# ----------------------------------------------------------------------------- mirrors, teams, pools, the rest


@pytest.mark.parametrize(("edit", "text", "risk"), [
    (lambda d: d["mirrors"].update(apt_proxy="http://10.64.0.2:3142"), "apt_proxy mirror none → http", "caution"),
    (lambda d: d["teams"].append({"name": "speech", "gpu_quota": 0}), "team speech added", "info"),
    (lambda d: d["teams"][1].update(gpu_quota=8), "team vision: GPU quota 16 → 8", "caution"),
    (lambda d: d["teams"][1].update(gpu_quota=None), "team vision: GPU quota 16 → None", "info"),
    (lambda d: d["cloud_pools"].append({"name": "mem", "vm_size": "Standard_E32s_v5", "max": 10}),
     "cloud pool mem added", "info"),
    (lambda d: d.update(cloud_pools=[]), "cloud pool cpu removed", "caution"),
    (lambda d: d["cloud_pools"][0].update(vm_size="Standard_D32s_v5"), "every node of the pool is replaced",
     "caution"),
    (lambda d: d.update(tier="production"), "tier dev → production", "caution"),
    (lambda d: d.update(backups={"interval_minutes": 30}), "backups.interval_minutes: 60 → 30", "info"),
], ids=["mirror", "team-add", "quota-lower", "quota-unlimited", "pool-add", "pool-remove", "pool-size", "tier",
        "unclaimed-field"])
def test_other_changes(repo: GitRepo, edit, text: str, risk: str):
    repo.edit("dev", edit)
    assert find(only(repo.diff()), text).risk == risk


def test_removing_a_team_is_caution(repo: GitRepo):
    def drop(d: dict[str, Any]) -> None:
        d["racks"].pop()
        d["teams"].pop()

    repo.edit("dev", drop)
    assert find(only(repo.diff()), "team vision removed").risk == "caution"
