"""Benchmark: validate + plan + inventory at 1,000 to 15,000 nodes, beside Ansible parsing the same hosts.

Each figure is one fresh process (so peak RSS is that process's own), best of N runs:

* skyrack cold:  no lock file yet: validate, allocate every pod range, write the lock,
                 render the YAML inventory.
* skyrack warm:  the lock exists (every CI run, every `join`): validate, plan from the
                 lock, check it is current, render the inventory.
* ansible-inventory: `ansible-inventory -i hosts.yml --list` on the inventory skyrack
                 wrote, i.e. Ansible merely parsing the same hosts (the peer).

Usage: python bench/plan_scale.py [--sizes 1000,2500,7500,15000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RACK = 64

SKYRACK_RUN = r"""
import sys
from pathlib import Path
sys.path.insert(0, {modules!r})
from skyrack import config, plan, inventory
path = Path({env!r})
env = config.load(path)
p = plan.build(env, path, plan.read_lock(path))
plan.write_lock(p)
Path({out!r}).write_text(inventory.dump_yaml(inventory.static(p)))
"""


def environment(nodes: int) -> str:
    racks = []
    for i in range((nodes + RACK - 1) // RACK):
        count = min(RACK, nodes - i * RACK)
        racks.append(f"  - {{name: r{i + 1:04d}, team: t{i % 4}, gpu: {{model: H100-SXM5-80GB, count: 8}}, "
                     f"node_range: {{count: {count}, first_ip: 10.{64 + i // 256}.{i % 256}.10}}}}")
    return "\n".join([
        "name: bench",
        "azure: {location: westus2, vnet_cidr: 10.0.0.0/16}",
        "control_plane: {apiservers: {count: 5}, etcd: {count: 5, events_cluster: true}}",
        'kubernetes: {version: "1.31.2", pod_cidr: 10.128.0.0/10, pods_per_node: 32}',
        "onprem: {cidrs: [10.64.0.0/14]}",
        "teams: [{name: t0}, {name: t1}, {name: t2}, {name: t3}]",
        "racks:", *racks, ""])


def measure(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[0]} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_maxrss / 1024


def best(cmd: list[str], repeat: int, before=None) -> tuple[float, float]:
    runs = []
    for _ in range(repeat):
        if before:
            before()
        runs.append(measure(cmd))
    return min(r[0] for r in runs), max(r[1] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,2500,7500,15000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    ansible = str(Path(sys.executable).with_name("ansible-inventory"))
    one_core = ["taskset", "-c", "0"] if subprocess.run(["which", "taskset"], capture_output=True).returncode == 0 else []
    print(f"{'nodes':>7} | {'skyrack cold':>18} | {'skyrack warm':>18} | {'ansible-inventory':>18} | warm/ansible")
    print(f"{'':>7} | {'s':>8} {'MiB':>9} | {'s':>8} {'MiB':>9} | {'s':>8} {'MiB':>9} |")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.sizes.split(",")):
            env = Path(tmp) / "bench.yaml"
            env.write_text(environment(n))
            lock = env.with_name("bench.lock.yaml")
            hosts = Path(tmp) / "hosts.yml"
            code = SKYRACK_RUN.format(modules=str(ROOT / "modules"), env=str(env), out=str(hosts))
            cmd = [*one_core, sys.executable, "-c", code]
            cold = best(cmd, args.repeat, before=lambda lock=lock: lock.unlink(missing_ok=True))
            warm = best(cmd, args.repeat)
            peer = best([*one_core, ansible, "-i", str(hosts), "--list"], args.repeat)
            print(f"{n:>7} | {cold[0]:>8.2f} {cold[1]:>9.0f} | {warm[0]:>8.2f} {warm[1]:>9.0f} | "
                  f"{peer[0]:>8.2f} {peer[1]:>9.0f} | {warm[0] / peer[0]:>6.2f}x", flush=True)


if __name__ == "__main__":
    main()
