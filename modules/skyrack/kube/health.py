"""Is the cluster ready for work? Its nodes Ready and the cluster's own workloads serving.

"Every Node Ready" is not "ready": a job started while CoreDNS has no ready endpoint fails its
first lookup (kube-proxy rejects traffic to a Service without endpoints), and a scheduler or
controller manager that has lost the API server schedules and reconciles nothing. So readiness
here is a list of checks, each answering from the API server's own state or from a node:

* ``kube-apiserver``     ``/readyz`` answers 200;
* ``kube-controller-manager``, ``kube-scheduler``   their leader-election Lease is held and was
  renewed within its duration (by the API server's clock, the Date of its answer): one of them is
  running, leading and talking to the API server;
* ``nodes``              every planned node registered and Ready: the API servers (each a Node with its
  own pod range) and the on-prem workers;
* ``kube-proxy``         its DaemonSet rolled out, and a Ready kube-proxy pod on every planned node;
* ``CoreDNS``            every replica of its Deployment ready, and the ``kube-dns`` Service's
  EndpointSlices holding a ready endpoint;
* ``node-local-dns``     its DaemonSet rolled out, and a Ready cache on every planned node;
* ``DNS``                a query for ``kubernetes.default.svc.<domain>`` sent from each node to the
  node's DNS cache (``kubernetes.node_dns_ip``, what kubelet gives every pod, so as a pod's lookup
  goes: the cache, then kube-dns through kube-proxy) answers with the ``kubernetes`` Service's IP.
  Asked from the on-prem nodes, where the jobs run (the lab's API servers cannot reach the racks' pods:
  docs/lab.md).

Stages: ``CONTROL_PLANE`` (the API server, the controller manager and the scheduler leading: what
`skyrack lab up` waits for, before any worker joined or the cluster layer ran) and ``CLUSTER``
(all of them; what `./dev lab`, `skyrack lab ready` and the lab tests wait for). :func:`wait`
polls until every check passes or the deadline, printing one line naming what is not ready each
time that changes.

The API and the nodes come in as two callables, so the checks run the same against the lab
(SSH to its nodes) and in tests (canned objects): ``get(path) -> (json, server_time)`` and
``run_on(host, argv) -> (exit code, output)``.
"""

from __future__ import annotations

import datetime as dt
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .. import plan as planmod
from . import bootstrap

Get = Callable[[str], tuple[dict[str, Any], dt.datetime]]
RunOn = Callable[[str, Sequence[str]], tuple[int, str]]

CONTROL_PLANE = "control-plane"
CLUSTER = "cluster"
LEASES = ("kube-controller-manager", "kube-scheduler")  # kube-system Leases, named as the components name them

# One A-record query, sent from a node to its DNS cache; prints the first address of the answer.
# Python's standard library only: every node has python3 (Ansible needs it), no node needs dig.
DNS_QUERY = r"""
import socket, struct, sys
name, server = sys.argv[1], sys.argv[2]
q = struct.pack(">HHHHHH", 0x5b5b, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
try:
    s.sendto(q, (server, 53))
    r = s.recv(512)
except OSError as exc:
    print(f"no answer ({type(exc).__name__}: {exc.strerror or exc})")
    sys.exit(1)
print(socket.inet_ntoa(r[-4:]) if struct.unpack(">H", r[6:8])[0] else "no answer (no record)")
"""


class NotReady(Exception):
    """The cluster was not ready by the deadline; the message names every check that was not."""

    def __init__(self, message: str, checks: list[Check]):
        super().__init__(message)
        self.checks = checks


@dataclass(frozen=True)
class Check:
    name: str
    ready: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def dns_query_argv(p: planmod.Plan) -> list[str]:
    """What a node runs to ask its DNS cache (every pod's resolver) for the `kubernetes` Service's name."""
    name = f"kubernetes.default.svc.{p.env.kubernetes.cluster_domain}"
    return ["python3", "-c", DNS_QUERY, name, p.node_dns_ip]


def _ready(conditions: list[dict[str, Any]] | None) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions or [])


def _time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _selector(labels: dict[str, str]) -> str:
    return urllib.parse.urlencode({"labelSelector": ",".join(f"{k}={v}" for k, v in labels.items())})


def _items(get: Get, path: str) -> list[dict[str, Any]]:
    return get(path)[0].get("items") or []


def check_apiserver(get: Get) -> Check:
    try:
        get("/readyz")
    except ApiError as exc:
        return Check("kube-apiserver", False, str(exc))
    return Check("kube-apiserver", True, "/readyz ok")


def check_lease(get: Get, name: str) -> Check:
    try:
        lease, now = get(f"/apis/coordination.k8s.io/v1/namespaces/{bootstrap.KUBE_SYSTEM}/leases/{name}")
    except ApiError as exc:
        return Check(name, False, "no leader yet" if exc.status == 404 else str(exc))
    spec = lease.get("spec") or {}
    holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
    if not holder or not renewed:
        return Check(name, False, "no leader yet")
    age = (now - _time(renewed)).total_seconds()
    duration = spec.get("leaseDurationSeconds") or 15
    if age > duration:
        return Check(name, False, f"leader {holder.split('_')[0]} last renewed its lease {age:.0f} s ago "
                                  f"(lease: {duration} s)")
    return Check(name, True, f"leader {holder.split('_')[0]}")


def check_nodes(get: Get, wanted: Sequence[str]) -> tuple[Check, set[str]]:
    """The planned nodes' readiness, and the set of those Ready (the other checks ask only those)."""
    nodes = {n["metadata"]["name"]: n for n in _items(get, "/api/v1/nodes")}
    ready = {name for name in wanted if name in nodes and _ready(nodes[name]["status"].get("conditions"))}
    missing = [name for name in wanted if name not in nodes]
    not_ready = [name for name in wanted if name in nodes and name not in ready]
    why = ([f"not registered: {', '.join(missing)}"] if missing else []) + (
        [f"NotReady: {', '.join(not_ready)}"] if not_ready else [])
    return Check("nodes", not why, "; ".join(why) or f"{len(ready)}/{len(wanted)} Ready"), ready


def _rolled_out(obj: dict[str, Any]) -> bool:
    return (obj.get("status") or {}).get("observedGeneration", 0) >= obj["metadata"].get("generation", 0)


def check_daemonset(get: Get, name: str, nodes: Sequence[str]) -> Check:
    """A kube-system DaemonSet (kube-proxy, node-local-dns): rolled out, a Ready pod on each of the nodes."""
    ns = bootstrap.KUBE_SYSTEM
    try:
        ds, _ = get(f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}")
    except ApiError as exc:
        return Check(name, False, "no DaemonSet yet" if exc.status == 404 else str(exc))
    st = ds.get("status") or {}
    desired, updated = st.get("desiredNumberScheduled", 0), st.get("updatedNumberScheduled", 0)
    if not _rolled_out(ds) or updated < desired:
        return Check(name, False, f"rolling out: {updated}/{desired} updated")
    selector = _selector(ds["spec"]["selector"]["matchLabels"])
    on = {p["spec"].get("nodeName") for p in _items(get, f"/api/v1/namespaces/{ns}/pods?{selector}")
          if p.get("status", {}).get("phase") == "Running" and _ready(p["status"].get("conditions"))}
    without = [n for n in nodes if n not in on]
    if without:
        return Check(name, False, f"no ready pod on {', '.join(without)}")
    return Check(name, True, f"ready on {len(nodes)} nodes")


def check_coredns(get: Get) -> Check:
    ns, name = bootstrap.KUBE_SYSTEM, bootstrap.COREDNS
    try:
        dep, _ = get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")
    except ApiError as exc:
        return Check("CoreDNS", False, "no Deployment yet" if exc.status == 404 else str(exc))
    want = dep["spec"].get("replicas", 1)
    ready = (dep.get("status") or {}).get("readyReplicas", 0)
    slices = _items(get, f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?"
                         + _selector({"kubernetes.io/service-name": bootstrap.DNS_SERVICE}))
    endpoints = sum(1 for s in slices for e in s.get("endpoints") or []
                    if (e.get("conditions") or {}).get("ready"))
    if want == 0:
        return Check("CoreDNS", False, "scaled to 0 replicas")
    if ready < want or not endpoints:
        return Check("CoreDNS", False, f"{ready}/{want} replicas ready, {endpoints} ready "
                                       f"endpoint{'' if endpoints == 1 else 's'} behind Service {bootstrap.DNS_SERVICE}")
    return Check("CoreDNS", True, f"{ready}/{want} replicas ready, {endpoints} endpoints")


def check_dns(p: planmod.Plan, run_on: RunOn, hosts: Sequence[str]) -> Check:
    argv, failed = dns_query_argv(p), []
    for host in hosts:
        rc, out = run_on(host, argv)
        answer = out.strip().splitlines()[-1] if out.strip() else f"exit {rc}"
        if rc != 0 or answer != p.api_service_ip:
            failed.append(f"{host}: {answer}")
    if failed:
        return Check("DNS", False, f"{argv[3]} at {p.node_dns_ip}: " + "; ".join(failed))
    return Check("DNS", True, f"{argv[3]} answers {p.api_service_ip} from {len(hosts)} nodes")


def checks(p: planmod.Plan, get: Get, run_on: RunOn | None, stage: str = CLUSTER) -> list[Check]:
    """Every check of the stage, in order; a check whose prerequisite is not ready is not asked, and an
    API server that stops answering part-way ends the list with a kube-apiserver check that says so."""
    out: list[Check] = []
    try:
        _checks(p, get, run_on, stage, out)
    except ApiError as exc:
        out.append(Check("kube-apiserver", False, str(exc)))
    return out


def _checks(p: planmod.Plan, get: Get, run_on: RunOn | None, stage: str, out: list[Check]) -> None:
    out.append(check_apiserver(get))
    if not out[0].ready:
        return
    out.append(check_lease(get, "kube-controller-manager"))
    # gang scheduling is the scheduler's own (skyrack.scheduler): it leads without the cluster layer
    out.append(check_lease(get, "kube-scheduler"))
    if stage == CONTROL_PLANE:
        return
    planned = [m.name for m in p.members if m.pod_cidr] + [n.name for n in p.nodes]
    nodes, ready = check_nodes(get, planned)
    hosts = [n for n in planned if n in ready]
    onprem = [n.name for n in p.nodes if n.name in ready]
    out += [nodes, check_daemonset(get, bootstrap.KUBE_PROXY, hosts), coredns := check_coredns(get),
            cache := check_daemonset(get, bootstrap.NODE_DNS, hosts)]
    if coredns.ready and cache.ready and run_on is not None and onprem:
        out.append(check_dns(p, run_on, onprem))
    elif run_on is not None:
        why = ("CoreDNS is not ready" if not coredns.ready else f"{bootstrap.NODE_DNS} is not ready"
               if not cache.ready else "no Ready node to ask from")
        out.append(Check("DNS", False, "not asked: " + why))


def summary(found: list[Check]) -> str:
    """One line: what is not ready, or that everything is."""
    waiting = [f"{c.name}: {c.detail}" for c in found if not c.ready]
    return "; ".join(waiting) if waiting else "ready: " + ", ".join(c.name for c in found)


def wait(probe: Callable[[], list[Check]], timeout_s: float, *, interval_s: float = 3,
         say: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> list[Check]:
    """Poll `probe` until every check is ready; NotReady naming what is not once `timeout_s` has passed.
    Says one line each time what is not ready changes (not every poll)."""
    deadline, last = clock() + timeout_s, None
    while True:
        found = probe()
        line = summary(found)
        if all(c.ready for c in found):
            return found
        if clock() + interval_s > deadline:
            raise NotReady(f"not ready after {timeout_s:.0f} s: {line}", found)
        if line != last:
            say(f"waiting: {line}")
            last = line
        sleep(interval_s)


class ApiError(Exception):
    """An API request that did not answer 200: the status (0 when nothing answered) and why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
