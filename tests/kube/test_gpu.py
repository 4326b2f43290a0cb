"""GPU nodes get the device plugin, the DCGM exporter and the health check; the health check's
scripts taint a node whose GPUs fail and untaint it when they recover (run for real, with fake
nvidia-smi and kubectl)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from skyrack.kube import gpu

from .placement import can_run_on, live_labels, pod_spec


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_gpu_daemonsets_run_on_every_gpu_node_and_nowhere_else(rendered, env):
    r = rendered(env)
    for name in ("nvidia-device-plugin", "dcgm-exporter", "gpu-health"):
        pod = pod_spec(r.one("DaemonSet", name, gpu.NAMESPACE).manifest)
        for node in {n.rack: n for n in r.plan.nodes}.values():
            assert can_run_on(pod, live_labels(node), node.taints) == bool(node.gpu_count), (name, node.rack)
        assert can_run_on(pod, {}, []) is False  # a CPU-only cloud node
        # and it keeps running on a node it has tainted, so it can clear the taint again
        gpu_node = next(n for n in r.plan.nodes if n.gpu_count)
        tainted = [*gpu_node.taints, "skyrack.io/gpu-unhealthy=ecc-errors:NoSchedule"]
        assert can_run_on(pod, live_labels(gpu_node), tainted)


def test_gpus_reach_a_pod_only_as_the_device_plugin_allocated_them(rendered):
    """The plugin lists a container's GPUs as volume mounts (which the toolkit, as the nvidia role sets it,
    accepts in place of NVIDIA_VISIBLE_DEVICES from unprivileged containers); only the two daemons that must see
    every GPU are privileged, and only they ask for all of them."""
    r = rendered("dev")
    containers = {c["name"]: c for name in ("nvidia-device-plugin", "dcgm-exporter", "gpu-health")
                  for c in pod_spec(r.one("DaemonSet", name, gpu.NAMESPACE).manifest)["containers"]}
    env = {n: {e["name"]: e.get("value") for e in c.get("env", [])} for n, c in containers.items()}
    assert env["nvidia-device-plugin"]["DEVICE_LIST_STRATEGY"] == "volume-mounts"
    privileged = {n for n, c in containers.items() if c.get("securityContext", {}).get("privileged")}
    assert privileged == {"dcgm-exporter", "probe"}
    assert {n for n, e in env.items() if e.get("NVIDIA_VISIBLE_DEVICES")} <= privileged
    assert containers["nvidia-device-plugin"]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_a_lab_without_gpus_gets_no_gpu_components(rendered):
    assert not [o for o in rendered("lab").objects() if o.manifest["metadata"].get("namespace") == gpu.NAMESPACE]


def _fake_bin(tmp: Path, name: str, body: str) -> None:
    path = tmp / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def run_health_check(tmp_path: Path, smi: str, gpu_count_label: str = "8") -> list[str]:
    """One probe pass and one tainter pass; returns the kubectl calls made."""
    rendered_cm = {"probe.sh": gpu.PROBE, "tainter.sh": gpu.health_check_scripts()["tainter.sh"]}
    bin_dir, status = tmp_path / "bin", tmp_path / "status"
    bin_dir.mkdir(exist_ok=True)
    status.mkdir(exist_ok=True)
    log = tmp_path / "kubectl.log"
    _fake_bin(bin_dir, "nvidia-smi", smi)
    _fake_bin(bin_dir, "kubectl", f'echo "$*" >> {log}\n'
                                  f'case "$1" in get) echo "{gpu_count_label}";; esac\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STATUS": str(status), "ONCE": "1",
           "INTERVAL": "1", "NODE_NAME": "r01-n01"}
    for script in ("probe.sh", "tainter.sh"):
        (tmp_path / script).write_text(rendered_cm[script])
        subprocess.run(["/bin/sh", str(tmp_path / script)], env=env, check=True, timeout=30, capture_output=True)
    return log.read_text().splitlines() if log.exists() else []


EIGHT_OK = "for i in 0 1 2 3 4 5 6 7; do echo \"$i, 0\"; done\n"


def test_health_check_clears_the_taint_on_a_healthy_node(tmp_path):
    calls = run_health_check(tmp_path, EIGHT_OK)
    assert calls[-1] == "taint node r01-n01 skyrack.io/gpu-unhealthy:NoSchedule-"


@pytest.mark.parametrize(("smi", "reason"), [
    ("for i in 0 1 2 3 4 5 6; do echo \"$i, 0\"; done\n", "gpu-missing"),
    ("for i in 0 1 2 3 4 5 6 7; do echo \"$i, $i\"; done\n", "ecc-errors"),
    ("echo 'NVIDIA-SMI has failed' >&2; exit 9\n", "nvidia-smi-failed"),
])
def test_health_check_taints_a_node_whose_gpus_fail(tmp_path, smi, reason):
    calls = run_health_check(tmp_path, smi)
    assert calls[-1] == f"taint node r01-n01 skyrack.io/gpu-unhealthy={reason}:NoSchedule --overwrite"


def test_health_check_reads_the_gpu_count_label_the_plan_sets(tmp_path):
    calls = run_health_check(tmp_path, EIGHT_OK)
    assert calls[0] == "get node r01-n01 -o jsonpath={.metadata.labels.nvidia\\.com/gpu\\.count}"
