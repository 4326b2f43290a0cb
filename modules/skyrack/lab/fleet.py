"""A simulated fleet on the lab's real control plane: an environment's planned nodes as KWOK nodes.

`skyrack lab fleet up ENV --shape configs/prod.yaml --nodes N` registers the first N nodes of
the shape environment's plan (rack order) with the lab's API servers, each exactly as the
join would register it: its name, the plan's labels and taints (`node_labels`/`node_taints`,
what the kubelet role passes kubelet), kubelet's own labels, its InternalIP, capacity from the
rack's `hardware` and GPUs (`nvidia.com/gpu`, what the device plugin reports), allocatable
minus the plan's kubelet reservation. One field a real node lacks: `spec.podCIDR` is the
node's planned pod range (real nodes leave it empty, the CNI configuration holds it), so the
pods KWOK "runs" get addresses from the plan.

KWOK (`sigs.k8s.io/kwok`, built against this Kubernetes: skyrack.build.kubernetes.kwok) runs
on the lab host as a daemon beside the registry and Azurite, manages only nodes with the
`kwok.x-k8s.io/node=fake` annotation, and plays kubelet at kubelet's own rhythm: a node
lease of 40 s renewed every 10 s, a status report every 5 minutes (upstream's heartbeat
stage says 10; kubelet's `nodeStatusReportFrequency` is 5), pods on its nodes Ready without
containers. What a fake node does not do: run containers, answer kubelet's port (logs, exec,
Prometheus' kubelet scrape time out), take CPU or memory on this machine.

`down` deletes every simulated node (their pods go with them) and stops KWOK; `skyrack lab
down` stops KWOK too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from .. import build, daemon
from .. import plan as planmod
from ..build import kubernetes as k8s_build
from ..errors import InputError, Problem
from ..plan import NodeVars, Plan
from . import cluster, controlplane
from .lifecycle import KWOK_MARKER, Lab, LabError, artifacts, open_lab
from .state import load, save

Say = Callable[[str], None]

SIMULATED_LABEL = "skyrack.io/simulated"  # on every fake node: how `down` finds them
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")  # what KWOK manages (--manage-nodes-with-annotation-selector)
MARKER = KWOK_MARKER  # in KWOK's command line (its configuration file): how its PID is known
LEASE_SECONDS = 40  # kubelet's nodeLeaseDurationSeconds; KWOK renews at a quarter of it, as kubelet does
STATUS_REPORT_MS = 5 * 60 * 1000  # kubelet's nodeStatusReportFrequency
SERVER_PORT = 10247  # KWOK's own health and metrics endpoint, on loopback
CHUNK = 250  # nodes per create request batch (kubectl create -f of a List)
WORKERS = 4


def node_manifest(node: NodeVars, shape: Plan) -> dict:
    """The Node the join would register for `node`, plus KWOK's annotation and the simulation's label."""
    labels = {**node.labels, "kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", SIMULATED_LABEL: "true"}
    taints = []
    for t in node.taints:
        kv, effect = t.rsplit(":", 1)
        key, _, value = kv.partition("=")
        taints.append({"key": key, "value": value, "effect": effect})
    r = node.reservation
    capacity = {"pods": str(node.max_pods)}
    allocatable = {"pods": str(node.max_pods)}
    if r is not None:
        capacity.update(cpu=str(r.cpus), memory=f"{r.memory_gib}Gi")
        allocatable.update(cpu=f"{r.allocatable_cpu_m}m", memory=f"{r.allocatable_memory_mi}Mi")
    if node.gpu_count:
        capacity[planmod.GPU_TAINT_KEY] = allocatable[planmod.GPU_TAINT_KEY] = str(node.gpu_count)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": labels, "annotations": dict([KWOK_ANNOTATION])},
            "spec": {"taints": taints, "podCIDR": node.pod_cidr, "podCIDRs": [node.pod_cidr]},
            "status": {"capacity": capacity, "allocatable": allocatable,
                       "addresses": [{"type": "InternalIP", "address": node.ip},
                                     {"type": "Hostname", "address": node.name}]}}


def manifests(shape: Plan, count: int) -> list[dict]:
    """The first `count` planned nodes of `shape`; InputError if it plans fewer."""
    if count < 1 or count > len(shape.nodes):
        raise InputError([Problem(str(shape.source), "racks",
                                  f"--nodes {count}: this environment plans {len(shape.nodes)} nodes; "
                                  f"give 1 to {len(shape.nodes)}")])
    return [node_manifest(n, shape) for n in shape.nodes[:count]]


# KWOK's workers (each default 4). Four lease workers renew ~200 leases a second at ~20 ms a request; 2,500
# nodes need 250 a second (every 10 s each) and 7,680 nodes 768, so leases expired and nodes went NotReady in
# the simulator, not in the control plane. Kubelets each renew their own: the fleet's must not queue.
PARALLELISM = {"nodeLeaseParallelism": 64, "nodePlayStageParallelism": 16, "podPlayStageParallelism": 16,
               "podsOnNodeSyncParallelism": 4}


def stages(entry: Path) -> str:
    """KWOK's configuration: its workers, and upstream's Stage files with the heartbeat at kubelet's status
    report frequency."""
    docs: list[dict] = [{"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
                         "options": dict(PARALLELISM)}]
    for f in sorted((entry / "stages").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and doc["metadata"]["name"] == "node-heartbeat-with-lease":
                doc["spec"]["delay"] = {"durationMilliseconds": STATUS_REPORT_MS,
                                        "jitterDurationMilliseconds": STATUS_REPORT_MS + 10_000}
            if doc:
                docs.append(doc)
    return yaml.safe_dump_all(docs, sort_keys=False)


def _kubectl(lab: Lab, arts: build.Artifacts, *args: str, stdin: str | None = None, timeout: float = 300) -> str:
    proc = cluster.kubectl(arts, lab.paths, *args, stdin=stdin, timeout=timeout)
    if proc.returncode != 0:
        raise LabError(f"kubectl {' '.join(args[:3])} failed: {proc.stderr.strip()[:500]}")
    return proc.stdout


def start_kwok(lab: Lab, say: Say = print) -> int:
    """KWOK on the lab host (idempotent): the PID, recorded in the lab's state."""
    st = load(lab.paths)
    assert st is not None, "up() checked the lab is up"
    if daemon.alive(st.kwok_pid, MARKER):
        return st.kwok_pid  # type: ignore[return-value]
    assert lab.kubernetes is not None, "artifacts() checked the lab runs Kubernetes"
    try:
        kwok = k8s_build.kwok(lab.kubernetes, say)  # built on first use (cached after)
    except build.BuildError as exc:
        raise LabError(str(exc)) from None
    home = controlplane.home(lab.paths)
    conf = home / MARKER
    conf.write_text(stages(kwok))
    kubeconfig = cluster.kubeconfig_path(lab.paths)
    pid = daemon.start([str(kwok / "bin/kwok"), f"--kubeconfig={kubeconfig}", f"--config={conf}",
                        f"--manage-nodes-with-annotation-selector={'='.join(KWOK_ANNOTATION)}",
                        f"--node-lease-duration-seconds={LEASE_SECONDS}",
                        f"--server-address=127.0.0.1:{SERVER_PORT}",
                        "--v=WARN"],  # at INFO it logs every lease renewal: 768 lines a second at 7,680 nodes
                       name="kwok", listen=("127.0.0.1", SERVER_PORT), log=lab.paths.log_dir / "kwok.log",
                       timeout=60, error=LabError)
    st.kwok_pid = pid
    save(lab.paths, st)
    say(f"KWOK {kwok.parent.name} running (pid {pid}, log {lab.paths.log_dir / 'kwok.log'})")
    return pid


def stop_kwok(lab: Lab) -> bool:
    st = load(lab.paths)
    if st is None:
        return False
    stopped = daemon.stop(st.kwok_pid, MARKER)
    st.kwok_pid = None
    save(lab.paths, st)
    return stopped


# what the node lifecycle controller taints a node with until it is Ready: it takes no pod until they go
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def simulated(lab: Lab, arts: build.Artifacts) -> dict[str, bool]:
    """Every simulated node the API server holds: name -> ready for pods (Ready, and the node lifecycle
    controller's not-ready taint, which every new node gets, removed)."""
    out = _kubectl(lab, arts, "get", "nodes", "-l", SIMULATED_LABEL, "-o",
                   "jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type==\"Ready\")].status}"
                   " {.spec.taints[*].key}{\"\\n\"}{end}")
    found = {}
    for line in out.splitlines():
        name, ready, *taints = line.split(" ")
        if name:
            found[name] = ready == "True" and not set(LIFECYCLE_TAINTS) & set(taints)
    return found


def wait_ready(poll: Callable[[], dict[str, bool]], wanted: set[str], timeout: float, *, min_ready: float = 1.0,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
               log: Path | None = None) -> int:
    """Poll until every wanted node is Ready, or the deadline: how many are Ready then. At the deadline fewer
    than `min_ready` of them (a fraction) is an error; more is the answer of a machine that cannot keep the
    whole fleet Ready (the caller reports the count)."""
    deadline = clock() + timeout
    while True:
        now = poll()
        ready = sum(1 for n in wanted if now.get(n))
        if ready == len(wanted):
            return ready
        if clock() > deadline:
            if ready >= min_ready * len(wanted):
                return ready
            raise LabError(f"{len(wanted) - ready} of {len(wanted)} simulated nodes not Ready after {timeout:.0f} s"
                           + (f"; KWOK's log: {log}" if log else ""))
        sleep(2)


def up(env_path: Path, shape_path: Path, count: int, timeout: float = 1800, say: Say = print,
       min_ready: float = 1.0) -> dict:
    """Register the first `count` nodes of `shape_path`'s plan; wait until every one is Ready (or, past the
    timeout, at least the fraction `min_ready` of them). Figures."""
    lab = open_lab(env_path)
    shape = planmod.make(shape_path)
    docs = manifests(shape, count)
    if load(lab.paths) is None or not cluster.kubeconfig_path(lab.paths).exists():
        raise LabError(f"lab {lab.plan.env.name} has no cluster up: `skyrack lab up {env_path}` first "
                       "(and its cluster layer and racks: `./dev lab` does all of it)")
    arts = artifacts(lab)
    start_kwok(lab, say)
    have = simulated(lab, arts)
    new = [d for d in docs if d["metadata"]["name"] not in have]
    t0 = time.monotonic()
    chunks = [new[i:i + CHUNK] for i in range(0, len(new), CHUNK)]

    def create(chunk: list[dict]) -> None:
        _kubectl(lab, arts, "create", "-f", "-", "-o", "name",
                 stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": chunk}))

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        list(pool.map(create, chunks))
    created = time.monotonic() - t0
    say(f"{len(new)} nodes of {shape.env.name} created in {created:.1f} s ({len(have)} were there)")
    wanted = {d["metadata"]["name"] for d in docs}
    ready = wait_ready(lambda: simulated(lab, arts), wanted, timeout, min_ready=min_ready,
                       log=lab.paths.log_dir / "kwok.log")
    if ready < len(wanted):
        say(f"{len(wanted) - ready} of {len(wanted)} not Ready after {timeout:.0f} s: going on with {ready} "
            f"(--min-ready {min_ready})")
    return {"environment": lab.plan.env.name, "shape": shape.env.name, "nodes": len(wanted), "created": len(new),
            "create_seconds": round(created, 1), "ready_seconds": round(time.monotonic() - t0, 1),
            "ready": ready, "all_ready": ready == len(wanted), "simulated": len(simulated(lab, arts))}


def down(env_path: Path, timeout: float = 1800, say: Say = print) -> dict:
    """Delete every simulated node (the pod garbage collector removes their pods) and stop KWOK."""
    lab = open_lab(env_path)
    if load(lab.paths) is None:
        say(f"lab {lab.plan.env.name} is not up: no simulated node to remove")
        return {"environment": lab.plan.env.name, "deleted": 0, "kwok_stopped": False}
    arts = artifacts(lab)
    names = list(simulated(lab, arts)) if cluster.kubeconfig_path(lab.paths).exists() else []
    t0 = time.monotonic()
    # in parallel batches, as `up` creates them: one `delete -l` deletes one node after another (4 a second),
    # and the API server's own delete-collection runs on one worker and outlives the request timeout
    chunks = [names[i:i + CHUNK] for i in range(0, len(names), CHUNK)]
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        list(pool.map(lambda c: _kubectl(lab, arts, "delete", "nodes", "--ignore-not-found", "--wait=false", *c,
                                         timeout=timeout), chunks))
    deadline = time.monotonic() + timeout
    while names and simulated(lab, arts):
        if time.monotonic() > deadline:
            raise LabError(f"simulated nodes still there {timeout:.0f} s after their deletion")
        time.sleep(2)
    stopped = stop_kwok(lab)
    say(f"{len(names)} simulated nodes deleted in {time.monotonic() - t0:.1f} s; KWOK {'stopped' if stopped else 'was not running'}")
    return {"environment": lab.plan.env.name, "deleted": len(names), "kwok_stopped": stopped}
