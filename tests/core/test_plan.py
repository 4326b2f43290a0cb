"""The plan: stable pod ranges, sizing, layout, and the lock file a reviewer reads."""

from __future__ import annotations

import ipaddress
import itertools
import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from skyrack import ipam, plan, sizing
from support import run_cli


def plan_json(path: Path, *extra: str) -> dict:
    proc = run_cli("plan", "--json", str(path), *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def edit(path: Path, mutate) -> None:
    data = yaml.safe_load(path.read_text())
    mutate(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def ranges(doc: dict) -> dict[str, str]:
    return {n["name"]: n["pod_cidr"] for n in doc["nodes"]}


def test_adding_a_node_to_dev_moves_no_existing_range(env_copy) -> None:
    path = env_copy("dev")
    before = plan_json(path)
    assert before["lock"]["up_to_date"], "the shipped lock file records the shipped plan"
    edit(path, lambda d: d["racks"][0]["nodes"].insert(1, {"name": "r01-n99", "ip": "10.64.1.99"}))

    stale = run_cli("inventory", str(path))
    assert stale.returncode == 1
    assert "dev.lock.yaml: out of date: 1 without a pod range (r01-n99)" in stale.stderr

    after = plan_json(path)
    assert after["lock"]["added"] == ["r01-n99"] and after["lock"]["written"]
    new = ranges(after)
    for name, cidr in ranges(before).items():
        assert new[name] == cidr, f"{name} moved"
    assert new["r01-n99"] not in ranges(before).values()
    assert plan_json(path)["lock"]["up_to_date"]


def test_removing_a_node_moves_no_other_range_and_keeps_its_own_until_the_join_removed_it(env_copy) -> None:
    path = env_copy("dev")
    before = ranges(plan_json(path))
    edit(path, lambda d: d["racks"][0]["nodes"].pop(0))
    stale = run_cli("inventory", str(path))
    assert stale.returncode == 1 and "out of date: 1 removed from the file (r01-n01)" in stale.stderr
    after = plan_json(path)
    assert after["lock"]["released"] == ["r01-n01"]
    assert after["lock"]["leaving"] == {"r01-n01": before["r01-n01"]}
    assert ranges(after) == {k: v for k, v in before.items() if k != "r01-n01"}
    lock_file = path.with_name("dev.lock.yaml")
    lock = yaml.safe_load(lock_file.read_text())
    assert "r01-n01" not in lock["nodes"] and lock["leaving"] == {"r01-n01": before["r01-n01"]}
    assert plan_json(path)["lock"]["up_to_date"], "a lock with leaving nodes is up to date"

    # a new node does not get the range pods of the leaving one may still hold
    edit(path, lambda d: d["racks"][0]["nodes"].append({"name": "r01-n09", "ip": "10.67.0.19"}))
    assert ranges(plan_json(path))["r01-n09"] != before["r01-n01"]

    # the join releases it once the node is gone (skyrack.join.departures): then the lock lets it go
    p = plan.make(path)
    assert plan.release(p, ["r01-n01"]) and "leaving" not in yaml.safe_load(lock_file.read_text())
    assert not plan.release(p, ["r01-n01"]), "releasing twice changes nothing"


def test_a_node_back_in_the_file_before_it_left_takes_its_range_back(env_copy) -> None:
    path = env_copy("dev")
    text = path.read_text()
    before = ranges(plan_json(path))
    edit(path, lambda d: d["racks"][0]["nodes"].pop(0))
    plan_json(path)
    path.write_text(text)
    back = plan_json(path)
    assert back["lock"]["added"] == ["r01-n01"] and ranges(back) == before and back["lock"]["leaving"] == {}


def test_locked_fails_when_the_lock_is_stale_and_writes_nothing(env_copy) -> None:
    path = env_copy("dev")
    lock = path.with_name("dev.lock.yaml")
    original = lock.read_text()
    edit(path, lambda d: d["racks"][0]["nodes"].append({"name": "r01-n05", "ip": "10.67.0.15"}))
    proc = run_cli("plan", "--locked", str(path))
    assert proc.returncode == 1
    assert "run `skyrack plan" in proc.stderr
    assert lock.read_text() == original


def test_missing_lock_is_created_by_plan_and_required_by_consumers(env_copy) -> None:
    path = env_copy("dev")
    path.with_name("dev.lock.yaml").unlink()
    proc = run_cli("inventory", str(path))
    assert proc.returncode == 1 and "dev.lock.yaml: missing" in proc.stderr
    assert plan_json(path)["lock"]["written"]
    assert run_cli("inventory", str(path)).returncode == 0


def test_changing_pod_cidr_reallocates_and_says_why(env_copy) -> None:
    path = env_copy("dev")
    edit(path, lambda d: d["kubernetes"].update(pod_cidr="10.208.0.0/12"))
    doc = plan_json(path)
    assert "every pod range is re-allocated" in doc["lock"]["reason"]
    assert all(ipaddress.ip_network(c).subnet_of(ipaddress.ip_network("10.208.0.0/12")) for c in ranges(doc).values())


def test_prod_pod_ranges_are_disjoint_sized_and_over_200k_addresses() -> None:
    p = plan.make("configs/prod.yaml")
    pod_cidr = p.env.kubernetes.pod_cidr
    nets = [ipaddress.ip_network(n.pod_cidr) for n in p.nodes] + [ipaddress.ip_network(x.pod_cidr) for x in p.pools]
    assert all(n.subnet_of(pod_cidr) for n in nets)
    starts = sorted((int(n.network_address), int(n.broadcast_address)) for n in nets)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(starts)), "two ranges overlap"
    node_ips = sum(ipaddress.ip_network(n.pod_cidr).num_addresses for n in p.nodes)
    assert len(p.nodes) >= 7500
    assert node_ips >= 200_000
    assert all(ipaddress.ip_network(n.pod_cidr).num_addresses >= 2 * n.max_pods for n in p.nodes)
    # on-prem ranges summarise into a handful of VPN routes
    assert len(p.onprem_pod_ranges) <= 4


def test_pools_take_one_range_from_the_top_and_join_the_vnet() -> None:
    p = plan.make("configs/prod.yaml")
    top = p.env.kubernetes.pod_cidr.broadcast_address
    highest = max(ipaddress.ip_network(x.pod_cidr).broadcast_address for x in p.pools)
    assert highest == top
    for pool in p.pools:
        net = ipaddress.ip_network(pool.pod_cidr)
        assert net.num_addresses >= pool.max * 2 * pool.max_pods
        assert pool.pod_cidr in p.vnet_address_space


def test_api_servers_take_node_ranges_below_the_pools_recorded_in_the_lock_and_kept() -> None:
    """Each API server is a Node: its pods need a range the lock records like a rack node's, routed to its VM."""
    p = plan.make("configs/prod.yaml")
    apis = p.members_of("apiserver")
    nets = [ipaddress.ip_network(m.pod_cidr) for m in apis]
    lowest_pool = min(ipaddress.ip_network(x.pod_cidr).network_address for x in p.pools)
    highest_node = max(ipaddress.ip_network(n.pod_cidr).broadcast_address for n in p.nodes)
    assert all(n.prefixlen == ipam.block_prefix(p.max_pods) for n in nets)
    assert all(highest_node < n.network_address and n.broadcast_address < lowest_pool for n in nets)
    assert len(set(nets)) == len(apis) and all(m.pod_cidr is None for m in p.members if m.role != "apiserver")
    assert p.apiserver_pod_ranges == [m.pod_cidr for m in apis]
    assert set(p.apiserver_pod_ranges) <= set(p.vnet_address_space)  # the VPN gateway advertises them
    lock = plan.read_lock(Path("configs/prod.yaml"))
    assert lock["apiservers"] == {m.name: m.pod_cidr for m in apis}


def test_api_server_ranges_are_stable_and_a_removed_one_is_freed(env_copy) -> None:
    env = env_copy("dev")
    before = plan_json(env)
    api_before = {m["name"]: m["pod_cidr"] for m in before["members"] if m["role"] == "apiserver"}
    assert len(api_before) == 3 and all(api_before.values())
    edit(env, lambda d: d["control_plane"]["apiservers"].update(count=5))
    after = plan_json(env)
    api_after = {m["name"]: m["pod_cidr"] for m in after["members"] if m["role"] == "apiserver"}
    assert {k: api_after[k] for k in api_before} == api_before  # nothing moved
    assert after["lock"]["added"] == ["apiserver/apiserver-3", "apiserver/apiserver-4"]
    assert ranges(after) == ranges(before) and [p["pod_cidr"] for p in after["pools"]] == \
        [p["pod_cidr"] for p in before["pools"]]
    edit(env, lambda d: d["control_plane"]["apiservers"].update(count=3))
    back = plan_json(env)
    assert back["lock"]["released"] == ["apiserver/apiserver-3", "apiserver/apiserver-4"]
    assert "apiserver-3" not in yaml.safe_load(plan.lock_path(env).read_text())["apiservers"]


def test_prod_control_plane_is_spread_over_zones() -> None:
    p = plan.make("configs/prod.yaml")
    for role in ("apiserver", "etcd", "etcd-events"):
        members = p.members_of(role)
        assert len(members) == 5
        assert {m.zone for m in members} == {"1", "2", "3"}
        assert {m.zone for m in members[:3]} == {"1", "2", "3"}, "any 3 consecutive members span 3 zones"
        assert all(ipaddress.ip_address(m.ip) in ipaddress.ip_network(m.subnet) for m in members)
    subnets = [ipaddress.ip_network(c) for c in p.subnets.values()]
    assert all(s.subnet_of(p.env.azure.vnet_cidr) for s in subnets)
    assert not any(a.overlaps(b) for i, a in enumerate(subnets) for b in subnets[:i])
    assert ipaddress.ip_address(p.apiserver_lb_ip) in ipaddress.ip_network(p.subnets["apiservers"])


def test_sizing_model_is_calibrated_on_the_published_figure() -> None:
    assert sizing.apiserver_heap_gib(7500) == pytest.approx(70.0)
    s = sizing.size(7500)
    assert s.apiserver_memory_gib >= 70
    vm_memory = {n: m for n, _, m in sizing.APISERVER_SIZES}
    assert vm_memory[s.apiserver_vm_size] >= s.apiserver_memory_gib
    assert s.etcd_vm_size.startswith("Standard_L"), "etcd always gets local NVMe"
    assert sizing.size(30000).apiserver_vm_size != s.apiserver_vm_size
    assert sizing.size(10).apiserver_vm_size == "Standard_E2s_v5"
    assert sizing.size(7500, apiserver_vm="Standard_E64s_v5").apiserver_vm_size == "Standard_E64s_v5"


def test_prod_plan_is_sized_for_its_nodes() -> None:
    p = plan.make("configs/prod.yaml")
    assert p.sizing.nodes == len(p.nodes) + 600
    assert p.sizing.apiserver_heap_gib > 70


def test_plan_text_summarises_for_a_reviewer(env_copy) -> None:
    proc = run_cli("plan", str(env_copy("dev")))
    assert proc.returncode == 0, proc.stderr
    assert "API servers: 3 x Standard_E8s_v5" in proc.stdout  # 104 nodes: 8 vCPUs (sizing)
    assert "Lock " in proc.stdout and "up to date" in proc.stdout


# ----------------------------------------------------------------------------- property

names = st.lists(st.sampled_from([f"n{i}" for i in range(40)]), unique=True, max_size=40)


@settings(max_examples=60, deadline=None)
@given(first=names, second=names, third=names)
def test_allocation_is_stable_under_any_sequence_of_changes(first, second, third) -> None:
    """Whatever nodes come and go, a node that stays keeps its range, and ranges never collide."""
    pod_cidr = ipaddress.ip_network("10.128.0.0/18")
    lock = None
    previous: dict[str, ipaddress.IPv4Network] = {}
    for wanted in (first, second, third):
        alloc = ipam.allocate(pod_cidr, 32, wanted, {"cpu": 10}, lock)
        assert set(alloc.nodes) == set(wanted)
        for name, net in alloc.nodes.items():
            if name in previous:  # stayed, or came back before the join removed it
                assert net == previous[name]
        assert set(alloc.leaving) == set(previous) - set(wanted)
        all_nets = [*alloc.nodes.values(), *alloc.pools.values(), *alloc.leaving.values()]
        assert not any(a.overlaps(b) for i, a in enumerate(all_nets) for b in all_nets[:i])
        lock = {"pod_cidr": str(pod_cidr), "block_prefix": ipam.block_prefix(32),
                "nodes": {k: str(v) for k, v in alloc.nodes.items()},
                "pools": {k: str(v) for k, v in alloc.pools.items()},
                "leaving": {k: str(v) for k, v in alloc.leaving.items()}}
        previous = {**alloc.leaving, **alloc.nodes}


MODULES = Path(__file__).resolve().parents[2] / "modules" / "skyrack"


@pytest.mark.parametrize("env", ["lab", "dev", "prod"])
def test_the_plan_holds_the_service_addresses_and_the_pod_limit(env) -> None:
    p = plan.make(Path(__file__).resolve().parents[2] / "configs" / f"{env}.yaml")
    services = ipaddress.ip_network(p.env.kubernetes.service_cidr)
    assert p.api_service_ip == str(services[1])  # kube-apiserver's own choice for the `kubernetes` Service
    assert p.dns_service_ip == str(services[10])  # kubeadm's for kube-dns
    assert p.max_pods == p.env.kubernetes.pods_per_node
    assert {n.max_pods for n in p.nodes} | {q.max_pods for q in p.pools} == {p.max_pods}


def test_consumers_read_derived_values_from_the_plan() -> None:
    """Change the plan's values (not the environment): the inventory and the certificates follow."""
    import dataclasses

    from skyrack import certs, inventory

    p = plan.make(Path(__file__).resolve().parents[2] / "configs" / "dev.yaml")
    p = dataclasses.replace(p, api_service_ip="10.96.0.7", dns_service_ip="10.96.0.53")
    # kubelet's clusterDNS on the racks: the node's cache (kubernetes.node_dns_ip), which forwards to kube-dns
    assert inventory.global_vars(p)["skyrack_cluster_dns"] == p.node_dns_ip == str(p.env.kubernetes.node_dns_ip)
    serving = next(s for s in certs.specs(p) if s.key.endswith("-serving"))
    assert "10.96.0.7" in serving.ips and "10.96.0.1" not in serving.ips


def test_label_and_taint_keys_are_spelled_once() -> None:
    """Every label key (and the team taint's) is written in plan.py only; other modules read the constant."""
    keys = {plan.ENV_LABEL, plan.RACK_LABEL, plan.TEAM_LABEL, plan.POOL_LABEL, plan.ZONE_LABEL,
            plan.GPU_PRODUCT_LABEL, plan.GPU_COUNT_LABEL, plan.TEAM_TAINT_KEY, plan.DISRUPTION_EXEMPT_LABEL}
    found = [f"{path.relative_to(MODULES)}: {key}" for path in sorted(MODULES.rglob("*.py")) if path.name != "plan.py"
             for key in keys if f'"{key}"' in path.read_text() or f"'{key}'" in path.read_text()]
    assert found == []
    assert not [path for path in MODULES.rglob("*.py") if path.name != "ipam.py"  # ipam.service_ip, which the plan calls
                if re.search(r"service_cidr\S*\.network_address", path.read_text())], "service IPs come from the plan"
