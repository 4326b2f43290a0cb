"""Benchmark: a real upgrade of the lab by one Kubernetes minor, in the order `skyrack upgrade --plan` prints,
with a workload running through it.

    sudo .venv/bin/python bench/upgrade.py [--from 1.36.3] [--replicas 4] [--keep] [--json]

1. **A lab at the minor before**: configs/lab.yaml with that version, that minor's package repository and
   its CoreDNS (the only differences; the lab builds that Kubernetes once, cached), brought up as `./dev lab`
   does: `lab up`, the cluster layer's `pulumi up`, `skyrack join`.
2. **A workload**: a Deployment of --replicas pods spread over the workers, a PodDisruptionBudget that lets
   one go at a time; every 2 s the number of its Ready pods is sampled.
3. **The file moved to the lab's version** (configs/lab.yaml's own values) and `skyrack upgrade --plan
   --outputs` printed (the cluster read: every worker behind).
4. **The control plane**: `skyrack lab replace <api server>` for each, one at a time (a new disk and the new
   user-data: `kubeadm init` of the new version against the cluster's etcd; each must answer /readyz).
5. **The cluster layer**: `skyrack lab pulumi --env F up --yes` (kubeadm-config, kubelet-config, kube-proxy,
   CoreDNS at the new version).
6. **The racks**: `skyrack join F --outputs O`: per batch drain, upgrade, `kubeadm upgrade node`, uncordon;
   then the same join again, which must change nothing.

Prints each step's time, every node's kubelet version before and after, and the workload's fewest Ready
pods (and any seconds with none). The lab is brought down at the end unless --keep. One lab at a time: it
refuses while another lab is up on this machine. Figures in docs/join.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "modules"))

from skyrack import plan as planmod  # noqa: E402
from skyrack import upstream  # noqa: E402
from skyrack.kube import isolation  # noqa: E402
from skyrack.lab import lifecycle  # noqa: E402

NAMESPACE, APP = "skyrack-bench", "upgrade-probe"


def skyrack(*args: str, timeout: float = 3600, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "skyrack", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "modules")})
    if check and proc.returncode:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"skyrack {' '.join(args)} failed (exit {proc.returncode}):\n{tail}")
    return proc


def kubectl(env: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run([sys.executable, "-m", "skyrack", "lab", "kubectl", "--env", str(env), *args], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "modules")})
    if proc.returncode:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def write_env(dest: Path, version: str) -> Path:
    """configs/lab.yaml at `version`: its minor's repository path and the CoreDNS the lab builds for it."""
    b = upstream.KUBERNETES_BUILDS[version]
    data = yaml.safe_load((ROOT / "configs" / "lab.yaml").read_text())
    data["kubernetes"]["version"] = version
    data["mirrors"]["kubernetes"] = data["mirrors"]["kubernetes"].replace(
        f"v1.{data['mirrors']['kubernetes'].split('/v1.')[1].split('/')[0]}/", f"v1.{b.minor}/")
    data["cluster"]["versions"]["coredns"] = b.images()["coredns"]
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "lab.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    lock = ROOT / "configs" / "lab.lock.yaml"
    (dest / "lab.lock.yaml").write_text(lock.read_text())
    return path


def versions(env: Path) -> dict[str, str]:
    nodes = json.loads(kubectl(env, "get", "nodes", "-o", "json"))["items"]
    return {n["metadata"]["name"]: n["status"]["nodeInfo"]["kubeletVersion"] for n in nodes}


class Probe(threading.Thread):
    """Ready pods of the workload every 2 s: the fewest seen, and the seconds with none."""

    def __init__(self, env: Path, replicas: int):
        super().__init__(daemon=True)
        self.env, self.replicas, self.stop = env, replicas, threading.Event()
        self.fewest, self.none_s, self.samples, self.errors = replicas, 0.0, 0, 0

    def run(self) -> None:
        while not self.stop.wait(2):
            try:
                d = json.loads(kubectl(self.env, "-n", NAMESPACE, "get", "deployment", APP, "-o", "json"))
            except (RuntimeError, subprocess.TimeoutExpired, ValueError):
                self.errors += 1  # the API server itself away (its replacement): counted, not a pod's failure
                continue
            ready = int(d.get("status", {}).get("readyReplicas") or 0)
            self.samples += 1
            self.fewest = min(self.fewest, ready)
            if ready == 0:
                self.none_s += 2


def workload(env: Path, replicas: int) -> None:
    """An operator's probe (a cluster-service namespace: outside the team policies) on the racks' workers only: the
    API servers are replaced, not drained."""
    kubectl(env, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NAMESPACE, "labels": isolation.cluster_service_labels()}}))
    labels = {"app": APP}
    pause = yaml.safe_load((ROOT / "configs" / "lab.yaml").read_text())["cluster"]["versions"]["pause"]
    pod = {"metadata": {"labels": labels}, "spec": {
        # the racks' team taint only: a pod that tolerates every NoSchedule taint tolerates the cordon's too and is
        # put straight back on the node being drained
        "tolerations": [{"key": planmod.TEAM_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": planmod.RACK_LABEL, "operator": "Exists"}]}]}}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": labels}}],
        "containers": [{"name": "pause", "image": pause,
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
    for obj in ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": APP, "namespace": NAMESPACE},
                 "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": pod}},
                {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": APP, "namespace": NAMESPACE},
                 "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}}):
        kubectl(env, "apply", "-f", "-", stdin=json.dumps(obj))
    kubectl(env, "-n", NAMESPACE, "rollout", "status", f"deployment/{APP}", "--timeout=300s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="old", default="1.36.3", choices=sorted(upstream.KUBERNETES_BUILDS))
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/skyrack-bench-upgrade"))
    ap.add_argument("--keep", action="store_true", help="leave the lab up at the end")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    new = yaml.safe_load((ROOT / "configs" / "lab.yaml").read_text())["kubernetes"]["version"]
    if upstream.KUBERNETES_BUILDS[args.old].minor + 1 != upstream.KUBERNETES_BUILDS[new].minor:
        ap.error(f"--from {args.old}: an upgrade goes one minor at a time, to the lab's {new}")
    if lifecycle.labs():
        raise SystemExit("another lab is up on this machine (`skyrack lab list`): one lab at a time")
    say = (lambda m: None) if args.json else (lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", flush=True))
    env = write_env(args.dir, args.old)
    steps: dict[str, float] = {}

    def step(name: str, *cmd: str, timeout: float = 3600) -> subprocess.CompletedProcess:
        say(f"{name}: skyrack {' '.join(cmd)}")
        t = time.monotonic()
        proc = skyrack(*cmd, timeout=timeout)
        steps[name] = round(time.monotonic() - t, 1)
        say(f"{name}: {steps[name]} s")
        return proc

    probe = None
    try:
        step(f"lab up at {args.old}", "lab", "up", str(env))
        step("cluster layer", "lab", "pulumi", "--env", str(env), "up", "--yes")
        outputs = skyrack("lab", "outputs", str(env)).stdout.strip()
        step("join", "join", str(env), "--outputs", outputs)
        skyrack("lab", "ready", str(env), "--wait", "300")
        before = versions(env)
        workload(env, args.replicas)
        probe = Probe(env, args.replicas)
        probe.start()

        write_env(args.dir, new)
        plan = skyrack("upgrade", str(env), "--plan", "--outputs", outputs).stdout
        say("the plan:\n" + plan)
        # with the cluster read: the members whose Node is behind (all of them here)
        planned = skyrack("upgrade", str(env), "--plan", "--json", "--outputs", outputs).stdout
        apiservers = json.loads(planned)["apiservers"]
        for member in apiservers:
            step(f"replace {member}", "lab", "replace", member, str(env))
        step("cluster layer at the new version", "lab", "pulumi", "--env", str(env), "up", "--yes")
        outputs = skyrack("lab", "outputs", str(env)).stdout.strip()
        step("racks (join: drain, upgrade, uncordon)", "join", str(env), "--outputs", outputs)
        again = step("join again", "join", str(env), "--outputs", outputs, "--json")
        changed = sum(h["changed"] for r in json.loads(again.stdout)["racks"] for h in r["hosts"])
        skyrack("lab", "ready", str(env), "--wait", "300")
        probe.stop.set()
        probe.join()
        after = versions(env)
        result = {"from": args.old, "to": new, "steps_s": steps, "before": before, "after": after,
                  "changed_on_second_join": changed,
                  "workload": {"replicas": args.replicas, "fewest_ready": probe.fewest, "seconds_with_none": probe.none_s,
                               "samples": probe.samples, "api_unanswered_samples": probe.errors}}
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(f"\nupgrade {args.old} → {new} of the lab ({len(after)} nodes)")
            for name, s in steps.items():
                print(f"  {name:<45} {s:>8.1f} s")
            for n in sorted(after):
                print(f"  {n:<20} {before.get(n, '-'):>10} → {after[n]}")
            print(f"  workload: {args.replicas} replicas, fewest Ready {probe.fewest}, {probe.none_s:.0f} s with none "
                  f"({probe.samples} samples; {probe.errors} without an answer from the API server)")
            print(f"  second join: {changed} task(s) changed")
        ok = all(v.lstrip("v") == new for v in after.values()) and changed == 0
        return 0 if ok else 1
    finally:
        if probe is not None:
            probe.stop.set()
        if not args.keep:
            skyrack("lab", "down", str(env), check=False, timeout=600)


if __name__ == "__main__":
    sys.exit(main())
