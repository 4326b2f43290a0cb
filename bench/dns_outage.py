"""Benchmark: cluster DNS and evictions while a rack, or the whole site, is cut off from the control plane.

On a lab that is up (`./dev lab`, configs/lab.yaml), the last rack's first node (with --wan: every rack's
node, a WAN outage) loses every packet to and from the API servers (iptables inside each node; the host
is not touched) for --minutes. Meanwhile every node asks its DNS cache (what its pods ask) for
kubernetes.default and a Service name every 2 s. Prints a timeline (NotReady, the unreachable taint, each
pod of a cut node marked for deletion) and, per node, the lookups made and failed; then the cut ends and
the nodes are waited back to Ready.

    sudo .venv/bin/python bench/dns_outage.py [--env configs/lab.yaml] [--minutes 10] [--wan] [--json]

tests/lab/test_kubernetes_dns.py runs the one-node cut for two minutes in ./dev test, and
tests/lab/test_kubernetes_disruption.py the WAN cut for three.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "modules"))
sys.path.insert(0, str(ROOT / "tests"))

from lab import outage  # noqa: E402  (the cut and the lookup loop the lab test uses)
from skyrack import plan as planmod  # noqa: E402
from skyrack.lab.state import Paths  # noqa: E402

NAMESPACE, PROBE = "skyrack-bench", "dns-probe"


def kubectl(env: Path, *args: str, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run([sys.executable, "-m", "skyrack", "lab", "kubectl", "--env", str(env), *args], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "modules")})
    if check and proc.returncode:
        raise SystemExit(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def _condition(node: dict) -> str:
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


def _ready(env: Path, name: str) -> bool:
    return _condition(json.loads(kubectl(env, "get", "node", name, "-o", "json"))) == "True"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", type=Path, default=ROOT / "configs/lab.yaml")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--wan", action="store_true", help="cut every rack's node, not one (a WAN outage)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    p = planmod.make(args.env)
    paths = Paths.for_bridge(p.env.lab.bridge)
    if not paths.ssh_config.exists():
        raise SystemExit(f"no lab up for {args.env} (bridge {p.env.lab.bridge}): run ./dev lab first")

    def ssh(host: str, command: str) -> str:
        proc = subprocess.run(["ssh", "-F", str(paths.ssh_config), "-o", "BatchMode=yes", host, command],
                              capture_output=True, text=True, timeout=60)
        if proc.returncode:
            raise SystemExit(f"{host}: {command!r}: {proc.stderr.strip()}")
        return proc.stdout

    kubectl(args.env, "create", "namespace", NAMESPACE, check=False)
    kubectl(args.env, "apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": PROBE, "namespace": NAMESPACE},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}}))
    domain = p.env.kubernetes.cluster_domain
    svc = json.loads(kubectl(args.env, "-n", NAMESPACE, "get", "service", PROBE, "-o", "json"))
    names = {f"kubernetes.default.svc.{domain}": p.api_service_ip,
             f"{PROBE}.{NAMESPACE}.svc.{domain}": svc["spec"]["clusterIP"]}
    victims = [n.name for n in p.nodes] if args.wan else [next(n.name for n in p.nodes
                                                              if n.rack == p.env.racks[-1].name)]
    coredns = [(x["metadata"]["name"], x["spec"].get("nodeName")) for x in json.loads(kubectl(
        args.env, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "json"))["items"]]
    seconds = args.minutes * 60
    loops = {n.name: outage.lookup_loop(paths.ssh_config, n.name, p.node_dns_ip, list(names), seconds + 30)
             for n in p.nodes}
    events: list[tuple[float, str]] = []
    seen: set[str] = set()
    start = time.monotonic()
    with ExitStack() as cuts:
        for victim in victims:
            cuts.enter_context(outage.cut(ssh, victim, outage.control_plane_addresses(p)))
        while time.monotonic() - start < seconds:
            marks = set()
            for node in json.loads(kubectl(args.env, "get", "nodes", "-o", "json"))["items"]:
                name = node["metadata"]["name"]
                if name in victims:
                    marks |= {f"{name} Ready={_condition(node)}"} | {
                        f"{name} taint {t['key']}:{t['effect']}" for t in node["spec"].get("taints", [])}
            pods = json.loads(kubectl(args.env, "get", "pods", "-A", "-o", "json"))["items"]
            marks |= {f"pod {x['metadata']['namespace']}/{x['metadata']['name']} on {x['spec']['nodeName']} marked "
                      "for deletion" for x in pods
                      if x["metadata"].get("deletionTimestamp") and x["spec"].get("nodeName") in victims}
            for m in sorted(marks - seen):
                events.append((time.monotonic() - start, m))
            seen |= marks
            time.sleep(5)
        rows = {n: outage.lookups(proc, 120) for n, proc in loops.items()}
    ended = time.monotonic()
    for victim in victims:
        outage.wait_node_condition(lambda v=victim: _ready(args.env, v), True, 600)
    back = time.monotonic() - ended
    result = {"cut_nodes": victims, "minutes": args.minutes, "coredns": coredns, "ready_again_after_s": round(back),
              "events": [{"t_s": round(t), "what": w} for t, w in events],
              "evicted": sorted({w for _, w in events if w.endswith("marked for deletion")}),
              "lookups": {n: {"made": len(r), "failed": len(outage.failures(r, names)),
                              "first_failures": outage.failures(r, names)[:5]} for n, r in rows.items()}}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"cut: {', '.join(victims)} from the API servers for {args.minutes:g} min; CoreDNS on "
          + ", ".join(f"{n} ({node})" for n, node in coredns))
    for e in result["events"]:
        print(f"  t+{e['t_s']:>4} s  {e['what']}")
    for n, r in result["lookups"].items():
        print(f"  {n:<10} {r['made']:>4} lookups, {r['failed']:>3} failed  {'; '.join(r['first_failures'])}")
    print(f"pods marked for deletion: {len(result['evicted'])}")
    print(f"Ready again {back:.0f} s after the cut ended")
    kubectl(args.env, "delete", "namespace", NAMESPACE, "--wait=false", check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
