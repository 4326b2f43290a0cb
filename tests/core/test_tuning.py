"""Settings for the load (skyrack.tuning): derived from the plan, rendered into every consumer, refused when
impossible."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from skyrack import certs, inventory, scheduler, sizing, tuning
from skyrack import plan as planmod
from skyrack.join import node_files
from skyrack.render import cloud_init
from support import run_cli

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(("nodes", "reads", "mutations", "client"), [
    (0, 400, 200, (20, 30, 50, 100)), (3, 400, 200, (20, 30, 50, 100)),
    (500, 400, 200, (20, 30, 50, 100)), (501, 1500, 500, (100, 100, 100, 100)),
    (3000, 1500, 500, (100, 100, 100, 100)), (3001, 3000, 1000, (100, 100, 100, 100)),
])
def test_inflight_limits_and_client_rates_follow_kubernetes_large_cluster_thresholds(nodes, reads, mutations, client):
    t = tuning.control_plane(nodes, 3)
    assert (t.max_requests_inflight, t.max_mutating_requests_inflight) == (reads, mutations)
    assert (t.controller_manager_qps, t.controller_manager_burst, t.scheduler_qps, t.scheduler_burst) == client


def test_goaway_only_with_more_than_one_api_server_and_shutdown_outlasts_the_probe():
    assert tuning.control_plane(10, 1).goaway_chance == 0
    assert "goaway-chance" not in dict(tuning.control_plane(10, 1).apiserver_args())
    assert dict(tuning.control_plane(10, 2).apiserver_args())["goaway-chance"] == "0.001"
    t = tuning.control_plane(10, 5)
    assert t.shutdown_delay_s > tuning.LB_PROBE_INTERVAL_S * tuning.LB_PROBE_THRESHOLD
    assert t.audit_log_bound_mib == t.audit_log_maxsize_mib * (t.audit_log_maxbackup + 1) <= 1024


@pytest.mark.parametrize(("cpus", "gib", "kube_cpu", "kube_mem"), [
    # GKE's published formula worked by hand (e.g. 8 GiB: 25 % of 4096 + 20 % of 4096 = 1843.2, rounded up)
    (1, 4, 60, 1024), (2, 8, 70, 1844), (4, 16, 80, 2663), (8, 32, 90, 3646), (32, 128, 150, 9544),
])
def test_kube_reserved_is_the_published_formula(cpus, gib, kube_cpu, kube_mem):
    r = tuning.kubelet_reservation(cpus, gib)
    assert (r.kube_cpu_m, r.kube_memory_mi) == (kube_cpu, kube_mem)


def test_a_gpu_node_keeps_most_of_itself_for_pods_and_evicts_before_the_kernel_kills():
    r = tuning.kubelet_reservation(224, 2048)
    assert r.allocatable_memory_mi / (2048 * 1024) > 0.97 and r.allocatable_cpu_m > 223_000
    assert r.eviction_memory_mi == 1024 and r.system_memory_mi == 2048
    fields = r.kubelet_fields()
    assert set(fields["evictionHard"]) == {"memory.available", "nodefs.available", "imagefs.available",
                                           "nodefs.inodesFree"}, "one signal alone would zero the others"


def test_azure_sizes_are_read_by_their_naming_rule():
    assert sizing.vm_hardware("Standard_D16s_v5") == (16, 64)
    assert sizing.vm_hardware("Standard_E32s_v5") == (32, 256)
    assert sizing.vm_hardware("Standard_E96s_v5") == (96, 672)  # the table wins over the rule
    assert sizing.vm_hardware("Standard_D16ls_v5") == (16, 32)
    assert sizing.vm_hardware("Standard_F8s_v2") == (8, 16)
    assert sizing.vm_hardware("Standard_NC24ads_A100_v4") is None


def test_api_servers_get_cores_as_well_as_memory():
    assert sizing.size(3).apiserver_cores == 1 and sizing.size(3).apiserver_vm_size == "Standard_E2s_v5"
    big = sizing.size(8280)
    assert big.apiserver_cores == 32
    assert sizing.vm_hardware(big.apiserver_vm_size)[0] >= 32


def _env(tmp_path: Path, name: str, edit) -> Path:
    data = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    edit(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / f"{name}.lock.yaml").write_text((CONFIGS / f"{name}.lock.yaml").read_text())
    return path


@pytest.mark.parametrize(("edit", "field", "message"), [
    (lambda d: d["racks"][0].update(hardware={"cpus": 1, "memory_gib": 1}), "racks[0].hardware",
     "keeps 840m CPU and 412Mi for pods"),
    (lambda d: d["racks"][0].update(hardware={"cpus": 0, "memory_gib": 64}), "racks[0].hardware.cpus", ""),
    (lambda d: d["cloud_pools"][0].update(vm_size="Standard_NC24ads_A100_v4"), "cloud_pools[0]",
     "does not know the size of Standard_NC24ads_A100_v4"),
])
def test_an_impossible_or_unknown_node_size_is_one_clear_error(tmp_path, edit, field, message):
    path = _env(tmp_path, "dev", edit)
    proc = run_cli("plan", str(path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{path}: {field}" in proc.stderr and message in proc.stderr, proc.stderr


def test_a_pool_of_an_unknown_size_is_sized_by_its_hardware(tmp_path):
    path = _env(tmp_path, "dev", lambda d: d["cloud_pools"][0].update(
        vm_size="Standard_NC24ads_A100_v4", hardware={"cpus": 24, "memory_gib": 220}))
    p = planmod.make(path)
    assert p.pools[0].reservation == tuning.kubelet_reservation(24, 220)


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_every_consumer_renders_the_plans_settings(name):
    """kubeadm's ClusterConfiguration (API server, controller manager), the scheduler's configuration, the audit
    policy, the API servers' and pools' kubelet drop-ins, and the racks' inventory all carry what the plan says."""
    p = planmod.make(CONFIGS / f"{name}.yaml")
    t = p.tuning
    assert t == tuning.control_plane(len(p.nodes) + sum(q.max for q in p.pools), len(p.members_of("apiserver")))
    member = p.members_of("apiserver")[0]
    pki = cloud_init.ApiServerPki.issued(certs.issue_all(p), member.name)
    config = yaml.safe_load(cloud_init.apiserver(p, member, pki, kubernetes_repo="https://x/"))
    files = {f["path"]: f["content"] for f in config["write_files"]}
    docs = list(yaml.safe_load_all(files["/etc/skyrack/kubeadm.yaml"]))
    cluster = next(d for d in docs if d["kind"] == "ClusterConfiguration")
    api_args = {a["name"]: a["value"] for a in cluster["apiServer"]["extraArgs"]}
    assert {k: api_args[k] for k, _ in t.apiserver_args()} == dict(t.apiserver_args())
    assert ("goaway-chance" in api_args) == (len(p.members_of("apiserver")) > 1)
    mounts = {v["mountPath"] for v in cluster["apiServer"]["extraVolumes"]}
    assert {tuning.AUDIT_POLICY_PATH, tuning.AUDIT_LOG_DIR} <= mounts
    assert yaml.safe_load(files[tuning.AUDIT_POLICY_PATH]) == tuning.audit_policy()
    cm_args = {a["name"]: a["value"] for a in cluster["controllerManager"]["extraArgs"]}
    assert cm_args["kube-api-qps"] == str(t.controller_manager_qps)
    sched = yaml.safe_load(files[cloud_init.SCHEDULER_CONFIG])
    assert sched["clientConnection"]["qps"] == t.scheduler_qps == scheduler.scheduler_config(p.env)["clientConnection"]["qps"]
    # the API server's own kubelet reserves for its VM size, through --config-dir
    init = next(d for d in docs if d["kind"] == "InitConfiguration")
    assert {"name": "config-dir", "value": cloud_init.KUBELET_CONFIG_DIR} in init["nodeRegistration"]["kubeletExtraArgs"]
    dropin = yaml.safe_load(files[f"{cloud_init.KUBELET_CONFIG_DIR}/{cloud_init.KUBELET_DROPIN}"])
    assert dropin["kubeReserved"] == member.reservation.kubelet_fields()["kubeReserved"]
    assert member.reservation == tuning.kubelet_reservation(*sizing.vm_hardware(member.vm_size))
    # a pool node's, for its VM size
    pool = p.pools[0]
    pool_cfg = yaml.safe_load(cloud_init.pool_node(p, pool, cloud_init.WorkerJoin("abcdef.0123456789abcdef", "sha256:00"),
                                                   kubernetes_repo="https://x/"))
    pool_files = {f["path"]: f["content"] for f in pool_cfg["write_files"]}
    pool_dropin = yaml.safe_load(pool_files[f"{cloud_init.KUBELET_CONFIG_DIR}/{cloud_init.KUBELET_DROPIN}"])
    assert pool_dropin["kubeReserved"] == tuning.kubelet_reservation(*sizing.vm_hardware(pool.vm_size)).kubelet_fields()["kubeReserved"]
    # a rack node's, for the rack's hardware: the inventory and the drop-in the kubelet role renders
    node = p.nodes[0]
    rack = next(r for r in p.env.racks if r.name == node.rack)
    assert inventory.rack_vars(node, p)["skyrack_kubelet_reserved"] == rack.hardware.reservation.kubelet_fields()
    rendered = yaml.safe_load(node_files.kubelet_config(p, node.name))
    assert {k: rendered[k] for k in ("kubeReserved", "systemReserved", "evictionHard")} == \
        rack.hardware.reservation.kubelet_fields()


def test_a_rack_without_hardware_renders_no_reservation(tmp_path):
    path = _env(tmp_path, "dev", lambda d: d["racks"][0].pop("hardware"))
    p = planmod.make(path)
    assert "kubeReserved" not in yaml.safe_load(node_files.kubelet_config(p, p.nodes[0].name))


def test_the_plan_shows_the_settings_to_a_reviewer():
    proc = run_cli("plan", str(CONFIGS / "prod.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "API server inflight 3000 reads / 1000 mutations, goaway-chance 0.001, shutdown delay 15 s" in proc.stdout
    assert "32 vCPUs needed for 8280 nodes" in proc.stdout
