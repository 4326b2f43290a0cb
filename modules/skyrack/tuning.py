"""Settings for the load, derived from the plan: one place, rendered into every consumer.

What the control plane and each kubelet are told depends on how large the cluster is and how large
each node is. `control_plane(...)` and `kubelet_reservation(...)` compute it from the plan; kubeadm's
ClusterConfiguration (API server, controller manager), the scheduler's configuration, the API
servers' audit policy and every kubelet's drop-in render what they return, and `skyrack plan`
prints it. Nothing here is a guess made in a template.

Where each figure comes from (docs/kube.md, "Settings for the load"):

* **API server inflight limits**: Kubernetes' own thresholds for large clusters (kube-up,
  ``cluster/gce/gci/configure-kubeapiserver.sh``): above 500 nodes 1,500 reads and 500 mutations,
  above 3,000 nodes 3,000 and 1,000: what its validated 5,000-node configuration runs. Below, the
  defaults (400 and 200). With priority and fairness on, their sum is the server's concurrency.
* **Controller manager and scheduler client QPS and burst**: that same 5,000-node configuration
  raises both to 100/100 above 500 nodes; below, upstream's defaults (20/30 and 50/100).
* **goaway-chance**: kube-apiserver's recommended 0.001 where more than one API server sits behind a
  load balancer (an HTTP/2 client otherwise stays on the server it first reached, and kubelets never
  rebalance after a restart); 0 with one server, as its help asks.
* **shutdown-delay-duration**: a stopping API server keeps serving (while `/readyz` fails) for as long
  as the load balancer's probe needs to take it out, plus one interval: no request is sent to a
  server that no longer listens.
* **Audit**: every request at Metadata level (who did what to which object, never a body), except the
  heavy, low-risk ones (leases, kubelets reading their nodes, pods and services, events, health
  probes; a kubelet reading a Secret is logged); the log rotates at a fixed
  size and count, so it never holds more than `audit_log_bound_mib`.
* **kubelet reservations**: kube-reserved by the formula GKE publishes for its nodes (CPU: 6 % of the
  first core, 1 % of the next, 0.5 % of the next two, 0.25 % above four; memory: 25 % of the first
  4 GiB, 20 % of the next 4, 10 % of the next 8, 6 % of the next 112, 2 % above 128 GiB);
  system-reserved 100m and 1 % of memory (256 MiB to 2 GiB) for the OS, containerd's shims and the
  GPU daemons; hard eviction at 0.5 % of memory free (100 MiB to 1 GiB) so kubelet evicts a pod
  before the kernel kills kubelet or containerd. The node's size comes from the plan: a rack's
  `hardware`, a pool's or a control-plane member's VM size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction as F
from typing import Any

# The API servers' Azure load-balancer probe (azure.apiservers): an unready server is out of rotation
# after LB_PROBE_THRESHOLD failed probes LB_PROBE_INTERVAL_S apart.
LB_PROBE_INTERVAL_S = 5
LB_PROBE_THRESHOLD = 2

AUDIT_POLICY_PATH = "/etc/kubernetes/skyrack-audit-policy.yaml"
AUDIT_LOG_DIR = "/var/log/kubernetes/audit"
AUDIT_LOG_MAXSIZE_MIB = 100  # one file
AUDIT_LOG_MAXBACKUP = 9  # rotated files kept beside the current one
AUDIT_LOG_MAXAGE_DAYS = 30

# (more than this many nodes, reads in flight, mutations in flight): kube-up's thresholds; the defaults below
INFLIGHT = ((3000, 3000, 1000), (500, 1500, 500), (-1, 400, 200))
LARGE_CLUSTER_NODES = 500  # above it, the 5,000-node configuration's client QPS
GOAWAY_CHANCE = 0.001

# Smallest node a kubelet reservation may leave: below this there is no room for a pod worth running.
MIN_ALLOCATABLE_CPU_M = 500
MIN_ALLOCATABLE_MEMORY_MI = 1024


@dataclass(frozen=True)
class ControlPlane:
    """The control plane's load settings for a cluster of `nodes` nodes and `apiservers` API servers."""

    nodes: int
    apiservers: int
    max_requests_inflight: int
    max_mutating_requests_inflight: int
    goaway_chance: float
    shutdown_delay_s: int
    controller_manager_qps: int
    controller_manager_burst: int
    scheduler_qps: int
    scheduler_burst: int
    audit_log_maxsize_mib: int = AUDIT_LOG_MAXSIZE_MIB
    audit_log_maxbackup: int = AUDIT_LOG_MAXBACKUP
    audit_log_maxage_days: int = AUDIT_LOG_MAXAGE_DAYS

    @property
    def audit_log_bound_mib(self) -> int:
        """The most the audit log ever holds on an API server's disk."""
        return self.audit_log_maxsize_mib * (self.audit_log_maxbackup + 1)

    def apiserver_args(self) -> list[tuple[str, str]]:
        args = [("max-requests-inflight", str(self.max_requests_inflight)),
                ("max-mutating-requests-inflight", str(self.max_mutating_requests_inflight)),
                ("shutdown-delay-duration", f"{self.shutdown_delay_s}s")]
        if self.goaway_chance:
            args.append(("goaway-chance", str(self.goaway_chance)))
        return [*args, ("audit-policy-file", AUDIT_POLICY_PATH),
                ("audit-log-path", f"{AUDIT_LOG_DIR}/audit.log"),
                ("audit-log-maxsize", str(self.audit_log_maxsize_mib)),
                ("audit-log-maxbackup", str(self.audit_log_maxbackup)),
                ("audit-log-maxage", str(self.audit_log_maxage_days))]

    def controller_manager_args(self) -> list[tuple[str, str]]:
        return [("kube-api-qps", str(self.controller_manager_qps)),
                ("kube-api-burst", str(self.controller_manager_burst))]


def control_plane(nodes: int, apiservers: int) -> ControlPlane:
    reads, mutations = next((r, m) for above, r, m in INFLIGHT if nodes > above)
    large = nodes > LARGE_CLUSTER_NODES
    return ControlPlane(
        nodes=nodes, apiservers=apiservers,
        max_requests_inflight=reads, max_mutating_requests_inflight=mutations,
        goaway_chance=GOAWAY_CHANCE if apiservers > 1 else 0.0,
        shutdown_delay_s=LB_PROBE_INTERVAL_S * (LB_PROBE_THRESHOLD + 1),
        controller_manager_qps=100 if large else 20, controller_manager_burst=100 if large else 30,
        scheduler_qps=100 if large else 50, scheduler_burst=100,
    )


def audit_policy() -> dict[str, Any]:
    """The API servers' audit policy (audit.k8s.io/v1): rules match in order, the first one wins."""
    core = {"group": ""}
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [
                # heavy and low-risk: heartbeats and leader election, nodes reading themselves, events, probes
                {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
                {"level": "None", "userGroups": ["system:nodes"], "verbs": ["get", "list", "watch"],
                 "resources": [{**core, "resources": ["nodes", "nodes/status", "pods", "services", "endpoints"]},
                               {"group": "discovery.k8s.io", "resources": ["endpointslices"]},
                               {"group": "storage.k8s.io", "resources": ["csinodes", "csidrivers"]},
                               {"group": "node.k8s.io", "resources": ["runtimeclasses"]}]},
                {"level": "None", "resources": [{**core, "resources": ["events"]},
                                                {"group": "events.k8s.io", "resources": ["events"]}]},
                {"level": "None", "nonResourceURLs": ["/healthz*", "/livez*", "/readyz*", "/version", "/metrics"]},
                # everything else: who, what, which object, the verdict; never a request or response body
                # (Secrets, tokens and ConfigMaps included)
                {"level": "Metadata"},
            ]}


@dataclass(frozen=True)
class Reservation:
    """What kubelet keeps back on a node of `cpus` vCPUs and `memory_gib` GiB."""

    cpus: int
    memory_gib: int
    kube_cpu_m: int
    kube_memory_mi: int
    system_cpu_m: int
    system_memory_mi: int
    eviction_memory_mi: int

    @property
    def allocatable_cpu_m(self) -> int:
        return self.cpus * 1000 - self.kube_cpu_m - self.system_cpu_m

    @property
    def allocatable_memory_mi(self) -> int:
        return self.memory_gib * 1024 - self.kube_memory_mi - self.system_memory_mi - self.eviction_memory_mi

    def kubelet_fields(self) -> dict[str, Any]:
        """The KubeletConfiguration fields of a node's drop-in. Every hard-eviction signal is listed: one
        given alone would leave the others at zero."""
        return {"kubeReserved": {"cpu": f"{self.kube_cpu_m}m", "memory": f"{self.kube_memory_mi}Mi"},
                "systemReserved": {"cpu": f"{self.system_cpu_m}m", "memory": f"{self.system_memory_mi}Mi"},
                "evictionHard": {"memory.available": f"{self.eviction_memory_mi}Mi", "nodefs.available": "10%",
                                 "imagefs.available": "15%", "nodefs.inodesFree": "5%"}}

    def short(self) -> str:
        return (f"{self.kube_cpu_m + self.system_cpu_m}m CPU, "
                f"{self.kube_memory_mi + self.system_memory_mi + self.eviction_memory_mi}Mi")

    def describe(self) -> str:
        return (f"kube {self.kube_cpu_m}m/{self.kube_memory_mi}Mi, system {self.system_cpu_m}m/"
                f"{self.system_memory_mi}Mi, eviction {self.eviction_memory_mi}Mi")


def _tiered(amount: int, tiers: tuple[tuple[int, F], ...], rest: F) -> F:
    """Sum of share x slice over consecutive (slice size, share) tiers, `rest` share beyond them (exact)."""
    total = F(0)
    for size, share in tiers:
        part = min(amount, size)
        total += part * share
        amount -= part
        if amount <= 0:
            return total
    return total + amount * rest


def kubelet_reservation(cpus: int, memory_gib: int) -> Reservation:
    """The reservation for a node of this size. ValueError when the node would keep less than
    MIN_ALLOCATABLE_CPU_M / MIN_ALLOCATABLE_MEMORY_MI for pods."""
    mem_mi = memory_gib * 1024
    res = Reservation(
        cpus=cpus, memory_gib=memory_gib,
        kube_cpu_m=math.ceil(_tiered(cpus * 1000, ((1000, F(6, 100)), (1000, F(1, 100)), (2000, F(5, 1000))),
                                     F(25, 10000))),
        kube_memory_mi=math.ceil(_tiered(mem_mi, ((4096, F(25, 100)), (4096, F(20, 100)), (8192, F(10, 100)),
                                                  (114688, F(6, 100))), F(2, 100))),
        system_cpu_m=100,
        system_memory_mi=min(max(math.ceil(F(mem_mi, 100)), 256), 2048),
        eviction_memory_mi=min(max(math.ceil(F(mem_mi, 200)), 100), 1024),
    )
    if res.allocatable_cpu_m < MIN_ALLOCATABLE_CPU_M or res.allocatable_memory_mi < MIN_ALLOCATABLE_MEMORY_MI:
        raise ValueError(f"a node of {cpus} vCPUs and {memory_gib} GiB keeps {res.allocatable_cpu_m}m CPU and "
                         f"{res.allocatable_memory_mi}Mi for pods after kubelet's reservations ({res.describe()}); "
                         f"skyrack needs at least {MIN_ALLOCATABLE_CPU_M}m and {MIN_ALLOCATABLE_MEMORY_MI}Mi")
    return res
