"""Benchmark: the lab's real control plane under a simulated fleet of up to 7,680 planned nodes (KWOK).

On a lab that is up (`./dev lab`, configs/lab.yaml), for each size in --nodes (ascending; the fleet grows,
`skyrack lab fleet up` adds the missing nodes), this:

1. registers the shape environment's first N planned nodes (`skyrack lab fleet up --shape`: labels, taints,
   sizes and GPUs as the join gives them; leases and status reports at kubelet's intervals) and times it;
2. lets the fleet run --settle seconds (leases renewed, DaemonSet pods placed on every node), then reads the
   API server's own /metrics: RSS, Go heap in use, and etcd's database size (`skyrack etcd status`);
3. places one gang of min(N, --gang) whole-node pods (8 GPUs each, all or nothing) and --small-jobs one-GPU
   pods, and times the scheduler from the first create to the last pod bound;
4. reports request latency over the whole step from the API server's `apiserver_request_duration_seconds`
   histogram (bucket deltas, interpolated as Prometheus' histogram_quantile does), beside Kubernetes'
   scalability SLOs: p99 <= 1 s for single-object mutating calls, <= 30 s for cluster-scoped LISTs
   (<= 5 s namespaced), per resource and verb (the SLO's unit), worst one shown;
5. reports the CPU the control plane's processes used during the settle window (cores: CPU seconds read
   from the host's /proc for every kube-apiserver, etcd, scheduler, controller manager and KWOK process,
   over wall seconds), beside the same window with no fleet measured first, and so the cores per
   1,000 nodes. On a saturated machine (the load average is printed) a process gets less than it asks
   for, so such a figure is a floor.

The cluster layer's Prometheus is scaled to zero for the run and restored after (--with-monitoring keeps
it): it scrapes every kubelet through the API server's node proxy, and a simulated node's kubelet port
never answers, so each scrape holds an API-server request until it times out, a load production's
answering kubelets do not make. The figures are then the fleet's own (docs/azure.md).

If a step fails (the API server stops answering, a timeout) the run stops there and says where and why.
A machine too small to keep the whole fleet Ready (this one at 7,680 nodes: docs/azure.md) can go on with
`--min-ready 0.9`: the step is measured with the nodes that are, and the table shows ready/nodes.
Prints a table (or --json); the fleet is removed at the end unless --keep.

    sudo .venv/bin/python bench/fleet_scale.py --nodes 1000,2500,5000,7680 [--env configs/lab.yaml]
        [--shape configs/prod.yaml] [--gang 512] [--small-jobs 1000] [--settle 120] [--with-monitoring]
        [--min-ready 1.0] [--keep] [--json]

tests/lab/test_kubernetes_fleet.py runs 200 nodes and a 64-pod gang in ./dev test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "modules"))

from skyrack import plan as planmod  # noqa: E402
from skyrack.kube import isolation, monitoring  # noqa: E402
from skyrack.lab import fleet  # noqa: E402

NS = "skyrack-bench-fleet"
# Control-plane processes whose CPU is measured, by their command name (the kernel's 15-character `comm`).
CPU_PROCESSES = {"kube-apiserver": "apiserver", "etcd": "etcd", "kube-scheduler": "scheduler",
                 "kube-controller": "controller-manager", "kwok": "kwok"}
SLO_MUTATING_S, SLO_LIST_CLUSTER_S, SLO_LIST_NAMESPACE_S = 1.0, 30.0, 5.0
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}


def cli(*args: str, stdin: str | None = None, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skyrack", *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "modules")},
                          check=False)


def kubectl(env: Path, *args: str, stdin: str | None = None, timeout: float = 600) -> str:
    proc = cli("lab", "kubectl", "--env", str(env), *args, stdin=stdin, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"kubectl {' '.join(args[:3])}: {proc.stderr.strip()[:400]}")
    return proc.stdout


# ----------------------------------------------------------------------------- the API server's metrics


def scrape(env: Path) -> dict:
    """What this bench reads from the API server's /metrics: gauges and the request-duration histogram."""
    text = kubectl(env, "get", "--raw", "/metrics", timeout=120)
    out: dict = {"buckets": defaultdict(dict), "gauges": {}}
    for fam in text_string_to_metric_families(text):
        if fam.name in ("process_resident_memory_bytes", "go_memstats_heap_inuse_bytes"):
            out["gauges"][fam.name] = fam.samples[0].value
        elif fam.name == "apiserver_request_duration_seconds":
            for s in fam.samples:
                if s.name.endswith("_bucket"):
                    lb = s.labels
                    key = (lb.get("verb", ""), lb.get("resource", ""), lb.get("subresource", ""), lb.get("scope", ""))
                    le = float("inf") if s.labels["le"] in ("+Inf", "inf") else float(s.labels["le"])
                    out["buckets"][key][le] = out["buckets"][key].get(le, 0.0) + s.value
    return out


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets {le: count}: linear within the bucket."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return None
    rank, prev_le, prev_count = q * total, 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if le == float("inf"):
                return prev_le  # the highest finite bound, as Prometheus answers
            return prev_le + (le - prev_le) * (rank - prev_count) / max(count - prev_count, 1e-12)
        prev_le, prev_count = le, count
    return prev_le


def latencies(before: dict, after: dict) -> dict:
    """p50/p99 of each SLO class over the step, and its worst resource/verb against the SLO."""
    classes: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    worst: dict[str, tuple[float, str]] = {}
    for key, b_after in after["buckets"].items():
        verb, resource, sub, scope = key
        delta = {le: c - before["buckets"].get(key, {}).get(le, 0.0) for le, c in b_after.items()}
        if not delta or max(delta.values()) <= 0:
            continue
        if verb in MUTATING and scope == "resource":
            cls = "mutating"
        elif verb == "GET" and scope == "resource":
            cls = "get"
        elif verb == "LIST":
            cls = "list-cluster" if scope == "cluster" else "list-namespace"
        else:
            continue  # WATCH, CONNECT, APPLY-less oddities
        for le, c in delta.items():
            classes[cls][le] += c
        p99 = quantile(0.99, delta)
        name = f"{verb} {resource}{'/' + sub if sub else ''}"
        if p99 is not None and (cls not in worst or p99 > worst[cls][0]):
            worst[cls] = (p99, name)
    slo = {"mutating": SLO_MUTATING_S, "get": SLO_MUTATING_S, "list-cluster": SLO_LIST_CLUSTER_S,
           "list-namespace": SLO_LIST_NAMESPACE_S}
    out = {}
    for cls, buckets in classes.items():
        w = worst.get(cls, (None, ""))
        out[cls] = {"calls": int(max(buckets.values())), "p50_s": _r(quantile(0.5, buckets)),
                    "p99_s": _r(quantile(0.99, buckets)), "worst_p99_s": _r(w[0]), "worst": w[1],
                    "slo_s": slo[cls], "within_slo": w[0] is None or w[0] <= slo[cls]}
    return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


# ----------------------------------------------------------------------------- CPU from /proc


def cpu_sample(proc: Path = Path("/proc")) -> dict[int, tuple[str, float]]:
    """{pid: (role, CPU seconds)} of every control-plane process on this host (lab nodes are containers: their
    processes are the host's). Read by PID so that a process that restarts in the window is not subtracted
    from another."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue  # gone since the listing
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if comm in CPU_PROCESSES:
            out[int(d.name)] = (CPU_PROCESSES[comm], (int(rest[11]) + int(rest[12])) / tick)  # utime + stime
    return out


def cores(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], seconds: float) -> dict:
    """Cores each role used between two samples (a PID new in `after` counts from zero)."""
    used: dict[str, float] = defaultdict(float)
    for pid, (role, cpu) in after.items():
        used[role] += cpu - before.get(pid, (role, 0.0))[1]
    return {role: round(v / seconds, 3) for role, v in sorted(used.items())}


def measure_cpu(seconds: float) -> dict:
    """Cores per control-plane role over `seconds` of wall time, and the load average at its end."""
    t0, s0 = time.monotonic(), cpu_sample()
    time.sleep(seconds)
    out = cores(s0, cpu_sample(), time.monotonic() - t0)
    return {"cores": out, "load1": round(os.getloadavg()[0], 1)}


def per_thousand(idle: dict, busy: dict, nodes: int) -> dict:
    """Cores per 1,000 nodes of each role: the window with the fleet minus the one without."""
    roles = set(idle["cores"]) | set(busy["cores"])
    return {r: round((busy["cores"].get(r, 0.0) - idle["cores"].get(r, 0.0)) * 1000 / nodes, 3) for r in sorted(roles)}


# ----------------------------------------------------------------------------- the steps


def etcd_db_bytes(env: Path) -> int | None:
    proc = cli("etcd", "status", str(env), "--json", timeout=120)
    try:
        members = json.loads(proc.stdout)["members"]
    except (ValueError, KeyError):
        return None
    sizes = [m["db_size"] for m in members if m["cluster"] == "etcd" and m.get("db_size")]
    return max(sizes) if sizes else None


def pods(name: str, count: int, gpus: int, image: str, group: bool) -> list[dict]:
    """`count` pods of `gpus` GPUs each, tolerating every team (an operator's namespace), on simulated nodes."""
    tolerations = [{"key": planmod.TEAM_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
                   {"key": planmod.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    docs: list[dict] = []
    if group:
        docs.append({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                     "metadata": {"name": name, "namespace": NS},
                     "spec": {"schedulingPolicy": {"gang": {"minCount": count}}}})
    for i in range(count):
        spec = {"terminationGracePeriodSeconds": 0, "tolerations": tolerations,
                "nodeSelector": {fleet.SIMULATED_LABEL: "true"},
                "containers": [{"name": "c", "image": image,
                                "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)},
                                              "limits": {"nvidia.com/gpu": str(gpus)}}}]}
        if group:
            spec["schedulingGroup"] = {"podGroupName": name}
        docs.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"{name}-{i:05d}", "namespace": NS, "labels": {"bench": name}}, "spec": spec})
    return docs


def bound(env: Path) -> int:
    out = kubectl(env, "get", "pods", "-n", NS, "-o", "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}")
    return sum(1 for line in out.splitlines() if line.strip())


def schedule(env: Path, gang: int, small: int, image: str, timeout: float = 1800) -> dict:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": isolation.cluster_service_labels()}}
    kubectl(env, "apply", "-f", "-", stdin=json.dumps(ns))
    docs = pods("gang", gang, 8, image, group=True) + pods("small", small, 1, image, group=False)
    t0 = time.monotonic()
    for i in range(0, len(docs), 500):
        kubectl(env, "create", "-f", "-", "-o", "name",
                stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs[i:i + 500]}))
    created = time.monotonic() - t0
    want = gang + small
    while (n := bound(env)) < want:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{want - n} of {want} pods not placed after {timeout:.0f} s")
        time.sleep(3)  # each look lists every pod: not more often, or the bench loads what it measures
    took = time.monotonic() - t0
    kubectl(env, "delete", "namespace", NS, "--wait=true", timeout=1800)
    return {"pods": want, "gang": gang, "small": small, "create_s": round(created, 1), "placed_s": round(took, 1),
            "pods_per_s": round(want / took, 1)}


def step(env: Path, shape: Path, n: int, args, image: str, idle: dict) -> dict:
    before = scrape(env)
    proc = cli("lab", "fleet", "up", str(env), "--shape", str(shape), "--nodes", str(n), "--json",
               "--min-ready", str(args.min_ready))
    if proc.returncode:
        raise RuntimeError(f"fleet up --nodes {n}: {(proc.stdout + proc.stderr).strip()[-600:]}")
    reg = json.loads(proc.stdout)
    cpu = measure_cpu(args.settle)
    steady = scrape(env)
    sched = schedule(env, min(n, args.gang), args.small_jobs, image)
    after = scrape(env)
    return {"nodes": n, "register": {"created": reg["created"], "create_s": reg["create_seconds"],
                                     "ready_s": reg["ready_seconds"], "ready": reg["ready"]},
            "apiserver_rss_mib": round(steady["gauges"].get("process_resident_memory_bytes", 0) / 2**20),
            "apiserver_heap_mib": round(steady["gauges"].get("go_memstats_heap_inuse_bytes", 0) / 2**20),
            "etcd_db_mib": round((etcd_db_bytes(env) or 0) / 2**20, 1), "schedule": sched,
            "cpu": {**cpu, "per_1000_nodes": per_thousand(idle, cpu, n)},
            "latency": latencies(before, after)}


def table(rows: list[dict]) -> str:
    lines = [f"{'nodes':>6} {'register':>9} {'RSS MiB':>8} {'heap MiB':>8} {'etcd MiB':>8} {'placed':>14} "
             f"{'mutating p99 (worst)':>24} {'LIST cluster p99 (worst)':>26} {'API/etcd cores':>14} {'load':>5} SLO"]
    for r in rows:
        lat = r["latency"]
        m, lc = lat.get("mutating", {}), lat.get("list-cluster", {})
        ok = all(v["within_slo"] for v in lat.values())
        nodes = str(r["nodes"]) if r["register"]["ready"] == r["nodes"] else f"{r['register']['ready']}/{r['nodes']}"
        lines.append(f"{nodes:>6} {r['register']['ready_s']:>8}s {r['apiserver_rss_mib']:>8} "
                     f"{r['apiserver_heap_mib']:>8} {r['etcd_db_mib']:>8} "
                     f"{str(r['schedule']['pods']) + ' in ' + str(r['schedule']['placed_s']) + 's':>14} "
                     f"{str(m.get('p99_s')) + ' (' + str(m.get('worst_p99_s')) + ')':>24} "
                     f"{str(lc.get('p99_s')) + ' (' + str(lc.get('worst_p99_s')) + ')':>26} "
                     f"{_cores(r['cpu']['cores']):>14} {r['cpu']['load1']:>5} {'met' if ok else 'MISSED'}")
    return "\n".join(lines)


def _cores(c: dict) -> str:
    return f"{c.get('apiserver', 0):.2f}/{c.get('etcd', 0):.2f}"


def pause_monitoring(env: Path) -> dict[str, int]:
    """Scale the monitoring namespace's Deployments to zero; returns their replicas, for `resume_monitoring`."""
    out = kubectl(env, "get", "deployment", "-n", monitoring.NAMESPACE, "-o",
                  "jsonpath={range .items[*]}{.metadata.name}={.spec.replicas}{\"\\n\"}{end}")
    saved = {name: int(n) for name, n in (line.split("=") for line in out.split() if "=" in line)}
    for name in saved:
        kubectl(env, "scale", "deployment", "-n", monitoring.NAMESPACE, name, "--replicas=0")
    return saved


def resume_monitoring(env: Path, saved: dict[str, int]) -> None:
    for name, n in saved.items():
        kubectl(env, "scale", "deployment", "-n", monitoring.NAMESPACE, name, f"--replicas={n}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", type=Path, default=ROOT / "configs/lab.yaml")
    ap.add_argument("--shape", type=Path, default=ROOT / "configs/prod.yaml")
    ap.add_argument("--nodes", default="1000,2500,5000,7680", help="sizes, comma-separated, ascending")
    ap.add_argument("--gang", type=int, default=512, help="whole-node pods in the gang (at most the fleet's size)")
    ap.add_argument("--small-jobs", type=int, default=1000, help="one-GPU pods placed beside the gang")
    ap.add_argument("--settle", type=float, default=120, help="seconds the fleet runs before the figures are read")
    ap.add_argument("--with-monitoring", action="store_true",
                    help="keep the cluster layer's Prometheus scraping the (unanswering) simulated kubelets")
    ap.add_argument("--min-ready", type=float, default=1.0,
                    help="go on with a step once its registration wait ends with at least this fraction Ready (a "
                         "machine too small for the whole fleet: the table then shows ready/nodes)")
    ap.add_argument("--keep", action="store_true", help="leave the fleet registered at the end")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        sizes = sorted(int(x) for x in args.nodes.split(","))
    except ValueError:
        ap.error(f"--nodes {args.nodes!r}: give node counts, comma-separated (1000,2500)")
    if not 0 < args.min_ready <= 1:
        ap.error(f"--min-ready {args.min_ready}: a fraction of the nodes, above 0 and at most 1")
    from skyrack import upstream

    image = upstream.KUBERNETES_BUILDS[planmod.make(args.env).env.kubernetes.version].images()["pause"]
    rows, stopped, idle, paused = [], None, {}, {}
    t0 = time.monotonic()
    try:
        if not args.with_monitoring:
            paused = pause_monitoring(args.env)
        print(f"fleet_scale: the control plane's CPU with no fleet, {args.settle:.0f} s ...", file=sys.stderr, flush=True)
        idle = measure_cpu(args.settle)
        print(f"fleet_scale: idle: {idle}", file=sys.stderr, flush=True)
        for n in sizes:
            print(f"fleet_scale: {n} nodes ...", file=sys.stderr, flush=True)
            rows.append(step(args.env, args.shape, n, args, image, idle))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        stopped = {"at_nodes": n, "why": str(exc)}
    finally:
        if not args.keep:
            cli("lab", "kubectl", "--env", str(args.env), "delete", "namespace", NS, "--ignore-not-found", timeout=1800)
            cli("lab", "fleet", "down", str(args.env), timeout=3600)
        resume_monitoring(args.env, paused)
    result = {"env": str(args.env), "shape": str(args.shape), "monitoring": args.with_monitoring, "idle_cpu": idle,
              "steps": rows, "stopped": stopped, "wall_s": round(time.monotonic() - t0)}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(table(rows))
        for r in rows:
            for cls, v in sorted(r["latency"].items()):
                print(f"  {r['nodes']:>5} nodes {cls:>14}: {v['calls']} calls, p50 {v['p50_s']} s, p99 {v['p99_s']} s, "
                      f"worst {v['worst']} p99 {v['worst_p99_s']} s (SLO {v['slo_s']} s)")
            print(f"  {r['nodes']:>5} nodes cpu: {r['cpu']['cores']} cores, load {r['cpu']['load1']}; per 1,000 nodes "
                  f"beyond idle ({idle.get('cores')}): {r['cpu']['per_1000_nodes']}")
        if stopped:
            print(f"stopped at {stopped['at_nodes']} nodes: {stopped['why']}")
    return 0 if not stopped else 1


if __name__ == "__main__":
    sys.exit(main())
