"""Control-plane VM sizes from the number of nodes the cluster must carry.

The model, and the one published figure it is calibrated on:

* kube-apiserver memory grows roughly linearly with nodes; at **7,500 nodes each API
  server used ~70 GB of heap** (5 API servers). Heap per API server is therefore
  ``BASE_HEAP_GIB + HEAP_GIB_PER_NODE * nodes`` with the line through (0, 2 GiB) and
  (7,500, 70 GiB): 9.07 MiB per node. It does not shrink with more API servers: every
  server holds its own watch cache of the whole cluster.
* Measured on skyrack's own configuration (bench/fleet_scale.py, docs/azure.md): a simulated fleet of
  1,000 to 5,000 planned nodes grew the lab API server's heap by 0.17-0.40 MiB per node and etcd by
  38-53 KiB per node. Simulated nodes bring no watchers (kubelet, kube-proxy, DNS), which the published
  figure includes and which dominate it, so the line above stays until watchers are measured.
* The VM needs the heap plus ``HEADROOM`` (GC, request bursts, watch fan-out) plus
  ``OS_GIB``. The smallest memory-optimised size (Ev5) that holds that is chosen.
* CPU: the API-server VM also runs the scheduler and the controller manager (one of them leads) and must
  carry the cluster's requests when a peer is down or being replaced. Its cores are at least what
  Kubernetes' own guidance gives a control-plane machine for the node count ("Considerations for large
  clusters": 1-5 nodes 1 vCPU, 6-10 2, 11-100 4, 101-250 8, 251-500 16, more 32), whichever of memory
  and cores asks for more. The figures there are for one machine with etcd on it; skyrack's etcd has
  its own VMs. The simulated fleet measured at most 0.30 API-server cores per 1,000 nodes for leases
  and status (about 2.3 cores at 7,680, a floor on a saturated machine), an order of magnitude below
  the guidance, which stays for the watch traffic a simulated node does not make.
* etcd is latency-bound on fsync, so it always runs on a local-NVMe size (Lsv3).
  Memory follows the database size: the backend quota and ~3x of it in page cache
  and snapshots; the largest clusters get more cores for the watch load.

`vm_size: auto` in the environment file uses this; any explicit size wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BASE_HEAP_GIB = 2.0
HEAP_GIB_PER_NODE = (70.0 - BASE_HEAP_GIB) / 7500
HEADROOM = 1.25
OS_GIB = 4.0

# (name, vCPUs, memory GiB), ascending
APISERVER_SIZES = (
    ("Standard_E2s_v5", 2, 16),
    ("Standard_E4s_v5", 4, 32),
    ("Standard_E8s_v5", 8, 64),
    ("Standard_E16s_v5", 16, 128),
    ("Standard_E20s_v5", 20, 160),
    ("Standard_E32s_v5", 32, 256),
    ("Standard_E48s_v5", 48, 384),
    ("Standard_E64s_v5", 64, 512),
    ("Standard_E96s_v5", 96, 672),
)
# Lsv3: local NVMe (1.92 TB per 8 vCPUs): the ~200 us fsync the published design relies on.
ETCD_SIZES = (
    ("Standard_L8s_v3", 8, 64),
    ("Standard_L16s_v3", 16, 128),
    ("Standard_L32s_v3", 32, 256),
)
ETCD_CORES_BY_NODES = ((1000, 8), (5000, 16), (10**9, 32))
APISERVER_CORES_BY_NODES = ((5, 1), (10, 2), (100, 4), (250, 8), (500, 16), (10**9, 32))

# Memory per vCPU of the Azure families whose sizes are named Standard_<family><vCPUs><features>_v<n>;
# a size with "l" among its features is the family's low-memory variant (2 GiB per vCPU).
_GIB_PER_VCPU = {"D": 4, "E": 8, "F": 2, "L": 8}
_AZURE_SIZE = re.compile(r"^Standard_([DEFL])([0-9]{1,3})([a-z]*)_v([0-9])$")


@dataclass(frozen=True)
class Sizing:
    nodes: int
    apiserver_heap_gib: float
    apiserver_memory_gib: float
    apiserver_cores: int
    apiserver_vm_size: str
    etcd_memory_gib: float
    etcd_vm_size: str


def apiserver_heap_gib(nodes: int) -> float:
    return BASE_HEAP_GIB + HEAP_GIB_PER_NODE * nodes


def vm_hardware(vm_size: str) -> tuple[int, int] | None:
    """(vCPUs, memory GiB) of an Azure size skyrack knows, or None: the control-plane tables, else the
    D, E, F and L families by their naming rule."""
    for name, vcpus, mem in APISERVER_SIZES + ETCD_SIZES:
        if name == vm_size:
            return vcpus, mem
    m = _AZURE_SIZE.match(vm_size)
    if m is None:
        return None
    family, vcpus, features = m.group(1), int(m.group(2)), m.group(3)
    return vcpus, vcpus * (2 if "l" in features else _GIB_PER_VCPU[family])


def _smallest(sizes: tuple[tuple[str, int, int], ...], memory_gib: float, cores: int = 0) -> str:
    for name, vcpus, mem in sizes:
        if mem >= memory_gib and vcpus >= cores:
            return name
    return sizes[-1][0]


def size(nodes: int, quota_backend_gib: int = 8, apiserver_vm: str = "auto", etcd_vm: str = "auto") -> Sizing:
    heap = apiserver_heap_gib(nodes)
    api_mem = heap * HEADROOM + OS_GIB
    etcd_mem = quota_backend_gib * 3 + OS_GIB
    etcd_cores = next(c for limit, c in ETCD_CORES_BY_NODES if nodes <= limit)
    api_cores = next(c for limit, c in APISERVER_CORES_BY_NODES if nodes <= limit)
    return Sizing(
        nodes=nodes,
        apiserver_heap_gib=round(heap, 1),
        apiserver_memory_gib=round(api_mem, 1),
        apiserver_cores=api_cores,
        apiserver_vm_size=_smallest(APISERVER_SIZES, api_mem, api_cores) if apiserver_vm == "auto" else apiserver_vm,
        etcd_memory_gib=round(etcd_mem, 1),
        etcd_vm_size=_smallest(ETCD_SIZES, etcd_mem, etcd_cores) if etcd_vm == "auto" else etcd_vm,
    )
