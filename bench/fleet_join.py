"""Benchmark: what Ansible costs the controller per host per task: serial vs parallel racks, local vs Receptor.

A fleet lab (bridge skyrackf0, 198.18.50.0/24, three racks, no Kubernetes so the nodes stay
light) is brought up and converged once; then each case runs `skyrack join` on the
converged racks (changed=0: the steady cost of every task, not the nodes' package installs)
and measures on the controller:

- CPU seconds of this process and everything it ran (ansible-playbook and its forks, the SSH
  clients) plus, for Receptor, the controller's receptor node: the controller's share;
- for Receptor, the CPU of the execution nodes (x01, x02: lab nodes on this machine, their
  cgroups' cpuacct: receptor, the workers and their SSH clients): the share moved off;
- task results (ok + failed + skipped + unreachable, summed over hosts) and wall time.

controller CPU / task results = the controller's CPU per host per task.

    sudo .venv/bin/python bench/fleet_join.py [--rack-nodes 2] [--repeat 2] [--json]

Every case runs the project's strategy (ansible.cfg: Mitogen's `mitogen_linear`); the serial local case
runs once more with Ansible's own `linear` (`local+linear`, its peer; `--no-linear` leaves it out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "modules"))
sys.path.insert(0, str(ROOT / "tests"))

import lab_variants as variants  # noqa: E402
from skyrack.join import driver  # noqa: E402
from skyrack.lab import lifecycle  # noqa: E402

BRIDGE, OCTET, RACKS = "skyrackf0", 50, 3
TICK = os.sysconf("SC_CLK_TCK")
quiet = Console(file=open("/dev/null", "w"))  # progress off: only the figures matter


def proc_cpu(pid: int) -> float:
    """utime + stime + reaped children's, of a running process (seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK


def own_cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def node_cpu(name: str) -> float:
    """CPU seconds of a lab node (its cgroup's cpuacct.usage, or cpu.stat on a cgroup v2 host)."""
    from skyrack.lab import nodes

    for g in nodes.cgroup_dirs(BRIDGE, name):
        if (g / "cpuacct.usage").exists():
            return int((g / "cpuacct.usage").read_text()) / 1e9
        if (g / "cpu.stat").exists():
            return int((g / "cpu.stat").read_text().split()[1]) / 1e6
    return 0.0


def case(env: Path, runs: Path, via: str, parallel: int, receptor_pid: int | None = None) -> dict:
    opts = driver.JoinOptions(runs_dir=runs, via=via, parallel=parallel, canary=parallel == 1)
    ctl = [receptor_pid] if via == "receptor" and receptor_pid else []
    exe = ["x01", "x02"] if via == "receptor" else []
    before = own_cpu(), sum(map(proc_cpu, ctl)), sum(map(node_cpu, exe))
    t0 = time.monotonic()
    result = driver.join_fleet(env, opts, quiet)
    wall = time.monotonic() - t0
    after = own_cpu(), sum(map(proc_cpu, ctl)), sum(map(node_cpu, exe))
    hosts = [h for r in result.runs for h in r.hosts]
    tasks = sum(h.ok + h.failed + h.skipped + h.unreachable for h in hosts)
    controller = (after[0] - before[0]) + (after[1] - before[1])
    executors = after[2] - before[2]
    return {"via": via, "parallel": parallel, "hosts": len(hosts), "task_results": tasks, "wall_s": round(wall, 1),
            "controller_cpu_s": round(controller, 1), "execution_nodes_cpu_s": round(executors, 1),
            "controller_ms_per_host_task": round(1000 * controller / max(1, tasks), 1),
            "changed": sum(h.changed for h in hosts), "ok": all(not r.failed_hosts for r in result.runs)}


@contextlib.contextmanager
def linear_strategy() -> Iterator[None]:
    """ansible-playbook (a child: ansible-runner passes this environment on) with Ansible's own linear strategy
    instead of the project's (ansible.cfg: Mitogen's mitogen_linear): the peer of the local serial case."""
    old = os.environ.get("ANSIBLE_STRATEGY")
    os.environ["ANSIBLE_STRATEGY"] = "linear"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("ANSIBLE_STRATEGY", None)
        else:
            os.environ["ANSIBLE_STRATEGY"] = old


def mitogen_version() -> str:
    from importlib.metadata import version

    return version("mitogen")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rack-nodes", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2, help="runs per case; the lowest controller CPU is kept")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    ap.add_argument("--no-linear", action="store_true", help="leave out the case with Ansible's linear strategy")
    args = ap.parse_args()
    from fleet.conftest import wait_routed, with_execution  # the same mesh the tests run
    from skyrack.lab.state import Paths, load

    out = Console(stderr=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="skyrack-bench-fleet-") as d:
        tmp = Path(d)
        env = variants.make(ROOT / "configs/lab.yaml", tmp / "env", BRIDGE, OCTET, rack_nodes=args.rack_nodes,
                            etcd=1, apiservers=1, kubernetes=False, racks=RACKS)
        try:
            lifecycle.up(env, say=out.print)  # with the lab's mesh: its Receptor, execution nodes x01 and x02
            for x in ("x01", "x02"):
                wait_routed(x)
            st = load(Paths.for_bridge(BRIDGE))
            receptor_pid = st.receptor_pid if st else None

            class L:  # what with_execution reads
                pass
            lab = L()
            lab.env = env  # type: ignore[attr-defined]
            renv = with_execution(lab, tmp / "renv", {"x01": ["r01", "r02"], "x02": ["r03"]})  # type: ignore[arg-type]
            runs = tmp / "runs"
            out.print("converging the fleet lab once (not measured)")
            first = driver.join_fleet(env, driver.JoinOptions(runs_dir=runs, parallel=RACKS), quiet)
            assert all(not r.failed_hosts for r in first.runs), [r.failed_hosts for r in first.runs]
            cases = [("local", 1), ("local", RACKS), ("receptor", 1), ("receptor", RACKS)]
            if not args.no_linear:
                cases.append(("local+linear", 1))
            for via, parallel in cases:
                best = None
                for _ in range(args.repeat):
                    with linear_strategy() if via.endswith("linear") else contextlib.nullcontext():
                        r = case(renv if via == "receptor" else env, runs, via.split("+")[0], parallel,
                                 receptor_pid)
                    r["via"] = via
                    if best is None or r["controller_cpu_s"] < best["controller_cpu_s"]:
                        best = r
                out.print(best)
                rows.append(best)
        finally:
            if not args.keep:
                lifecycle.down(env, say=lambda _m: None)
    result = {"cases": rows, "cores": os.cpu_count(),
              "strategy": f"mitogen_linear (mitogen {mitogen_version()}); local+linear: Ansible's linear",
              "load_avg_1m": round(os.getloadavg()[0], 1),
              "ansible_core": subprocess.run([sys.executable, "-c", "import ansible; print(ansible.__version__)"],
                                             capture_output=True, text=True).stdout.strip()}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    t = Table("via", "racks at once", "hosts", "task results", "wall s", "controller CPU s",
              "execution nodes CPU s", "controller ms / host / task", "changed",
              title=f"skyrack join, {RACKS} racks x {args.rack_nodes} nodes, converged", title_justify="left")
    for r in rows:
        t.add_row(r["via"], str(r["parallel"]), str(r["hosts"]), str(r["task_results"]), str(r["wall_s"]),
                  str(r["controller_cpu_s"]), str(r["execution_nodes_cpu_s"]),
                  str(r["controller_ms_per_host_task"]), str(r["changed"]))
    Console().print(t)
    Console().print(f"strategy: {result['strategy']}")


if __name__ == "__main__":
    main()
