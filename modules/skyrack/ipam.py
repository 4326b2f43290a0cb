"""IP address management: the VNet's subnets and one pod range per node.

Pod ranges ("alias IPs": secondary IP configurations on Azure NICs, routed ranges
on-prem) are carved from `kubernetes.pod_cidr` in fixed-size blocks:

* a block holds twice `pods_per_node` addresses rounded up to a power of two (the
  GKE convention: pod IPs are not reused the moment a pod dies);
* on-prem nodes take blocks from the **bottom** of pod_cidr, lowest free first, so
  their ranges summarise into few routes over the VPN;
* each cloud pool takes one aligned range for its maximum size from the **top**, so
  it can be added to the VNet's address space as a single prefix;
* each API server takes one node-sized block from the top too, below the pools (its
  pods, DaemonSets' mostly, are routed to its VM by the VNet's route table).

Allocations are **stable**: existing ones come from the lock file and never move when
nodes are added or removed. A removed node's range is not free at once: the lock keeps it
under `leaving` until `skyrack join` has drained, reset and deleted the node, so no new node
gets addresses that pods on the old one may still hold. Only a change of pod_cidr or of the block size (which
moves everything) or a pool outgrowing its range moves them, and the plan says so.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

IPv4Net = ipaddress.IPv4Network

# The VNet layout: fixed slots only, so no pool change ever moves the control plane. A cloud
# pool's subnet is its pod range (node and pod addresses in one subnet, as Azure CNI lays it
# out), allocated from pod_cidr with the node ranges and added to the VNet's address space.
FIXED_SUBNETS: tuple[tuple[str, int], ...] = (
    ("GatewaySubnet", 27),  # Azure requires this exact name; /27 is its recommended minimum
    ("apiservers", 28),
    ("etcd", 28),
    ("etcd-events", 28),
    # Azure DNS Private Resolver's outbound endpoint (delegated; /28 is its minimum): on-prem names at boot.
    ("dns-resolver", 28),
)


def block_prefix(max_pods: int) -> int:
    return 32 - math.ceil(math.log2(2 * max_pods))


def block_capacity(pod_cidr: IPv4Net, max_pods: int) -> int:
    return 2 ** max(0, block_prefix(max_pods) - pod_cidr.prefixlen)


def vnet_layout(vnet: IPv4Net) -> dict[str, IPv4Net]:
    """Subnets of the VNet (`azure.vnet_cidr`), in a fixed order. Raises ValueError when they do not fit."""
    wanted = list(FIXED_SUBNETS)
    out: dict[str, IPv4Net] = {}
    cursor = int(vnet.network_address)
    end = int(vnet.broadcast_address)
    for name, prefix in wanted:
        size = 2 ** (32 - prefix)
        cursor = (cursor + size - 1) // size * size  # align
        if prefix < vnet.prefixlen or cursor + size - 1 > end:
            raise ValueError(
                f"{vnet} is too small: subnet {name!r} (/{prefix}) does not fit after "
                + (", ".join(f"{n} {c}" for n, c in out.items()) or "nothing")
            )
        out[name] = ipaddress.IPv4Network((cursor, prefix))
        cursor += size
    return out


def vnet_problem(vnet: IPv4Net) -> str | None:
    try:
        vnet_layout(vnet)
    except ValueError as exc:
        return str(exc)
    return None


def member_ip(subnet: IPv4Net, index: int) -> ipaddress.IPv4Address:
    """Static address of the index-th member of a subnet (Azure reserves the first four)."""
    return subnet.network_address + 4 + index


def load_balancer_ip(subnet: IPv4Net) -> ipaddress.IPv4Address:
    """The API servers' internal load balancer: the last usable address of their subnet."""
    return subnet.broadcast_address - 1


# Addresses of the service range Kubernetes' conventions fix (the range must hold both).
API_SERVICE_INDEX = 1  # the `kubernetes` Service: kube-apiserver takes the range's first address
DNS_SERVICE_INDEX = 10  # kube-dns: the tenth, kubeadm's choice, which every kubelet's clusterDNS names


def service_ip(service_cidr: IPv4Net, index: int) -> ipaddress.IPv4Address:
    """The index-th address of the service range (API_SERVICE_INDEX, DNS_SERVICE_INDEX)."""
    return service_cidr.network_address + index


# ----------------------------------------------------------------------------- pod ranges


@dataclass
class Allocation:
    """Result of allocating pod ranges: the ranges and what changed against the lock."""

    nodes: dict[str, IPv4Net]
    pools: dict[str, IPv4Net]
    apiservers: dict[str, IPv4Net] = field(default_factory=dict)  # control-plane members with a kubelet
    added: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # existing names whose range changed
    reason: str | None = None  # why everything moved, when it did
    # Nodes gone from the environment whose range stays reserved until `skyrack join` has drained,
    # reset and deleted them (join/departures.py); `released` names the ones that only now left.
    leaving: dict[str, IPv4Net] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.released or self.moved or self.reason)


class _Bitmap:
    """Free/used blocks of pod_cidr, indexed from its start."""

    def __init__(self, pod_cidr: IPv4Net, prefix: int):
        self.base = int(pod_cidr.network_address)
        self.shift = 32 - prefix
        self.size = 2 ** (prefix - pod_cidr.prefixlen)
        self.used = bytearray(self.size)
        self.low = 0  # every block below this is used

    def index(self, net: IPv4Net) -> int:
        return (int(net.network_address) - self.base) >> self.shift

    def mark(self, net: IPv4Net) -> None:
        start = self.index(net)
        n = max(1, 2 ** (32 - net.prefixlen) >> self.shift)
        self.used[start:start + n] = b"\x01" * n

    def is_free(self, start: int, n: int) -> bool:
        return start >= 0 and start + n <= self.size and not any(self.used[start:start + n])

    def net(self, start: int, prefix: int) -> IPv4Net:
        return ipaddress.IPv4Network((self.base + (start << self.shift), prefix))

    def take_low(self, prefix: int) -> IPv4Net | None:
        i = self.used.find(0, self.low)
        if i < 0:
            return None
        self.used[i] = 1
        self.low = i + 1
        return self.net(i, prefix)

    def take_high(self, n_blocks: int, prefix: int) -> IPv4Net | None:
        start = (self.size - n_blocks) // n_blocks * n_blocks
        while start >= 0:
            if self.is_free(start, n_blocks):
                self.used[start:start + n_blocks] = b"\x01" * n_blocks
                return self.net(start, prefix)
            start -= n_blocks
        return None


def allocate(
    pod_cidr: IPv4Net,
    max_pods: int,
    node_names: list[str],
    pools: dict[str, int],
    lock: dict | None,
    members: Sequence[str] = (),
) -> Allocation:
    """Give every node, pool and API server (`members`) a pod range, keeping every allocation the lock records.

    `pools` maps pool name to its maximum node count. Raises ValueError if pod_cidr is full.
    An API server gone from the plan frees its range at once: its VM, and its pods, go with it.
    """
    prefix = block_prefix(max_pods)
    bitmap = _Bitmap(pod_cidr, prefix)
    lock = lock or {}
    old_nodes: dict[str, str] = dict(lock.get("nodes") or {})
    old_pools: dict[str, str] = dict(lock.get("pools") or {})
    old_leaving: dict[str, str] = dict(lock.get("leaving") or {})
    old_members: dict[str, str] = dict(lock.get("apiservers") or {})
    reason = None
    if lock and (lock.get("pod_cidr") != str(pod_cidr) or lock.get("block_prefix") != prefix):
        reason = (f"pod_cidr/block size changed from {lock.get('pod_cidr')} /{lock.get('block_prefix')} "
                  f"to {pod_cidr} /{prefix}: every pod range is re-allocated")
        kept_nodes: dict[str, IPv4Net] = {}
        kept_pools: dict[str, IPv4Net] = {}
        kept_members: dict[str, IPv4Net] = {}
        leaving: dict[str, IPv4Net] = {}
    else:
        wanted = set(node_names)
        known = {**old_leaving, **old_nodes}
        # a node back in the file before it left takes its range back from `leaving`
        kept_nodes = {n: ipaddress.IPv4Network(c) for n, c in known.items() if n in wanted}
        leaving = {n: ipaddress.IPv4Network(c) for n, c in sorted(known.items()) if n not in wanted}
        kept_pools = {}
        for name, cidr in old_pools.items():
            net = ipaddress.IPv4Network(cidr)
            if name in pools and 2 ** (32 - net.prefixlen) >> (32 - prefix) >= _pool_blocks(pools[name]):
                kept_pools[name] = net
        kept_members = {n: ipaddress.IPv4Network(c) for n, c in old_members.items() if n in members}
    for net in (*kept_nodes.values(), *kept_pools.values(), *kept_members.values(), *leaving.values()):
        bitmap.mark(net)

    result = Allocation(nodes={}, pools={}, reason=reason, leaving=leaving)
    for name in pools:
        if name in kept_pools:
            result.pools[name] = kept_pools[name]
            continue
        n_blocks = _pool_blocks(pools[name])
        net = bitmap.take_high(n_blocks, prefix - int(math.log2(n_blocks)))
        if net is None:
            raise ValueError(f"{pod_cidr} has no free aligned range for pool {name!r} ({n_blocks} node ranges)")
        result.pools[name] = net
        if name in old_pools and not reason:
            result.moved.append(f"pool/{name}")
        elif not reason:
            result.added.append(f"pool/{name}")
    for name in members:
        if name in kept_members:
            result.apiservers[name] = kept_members[name]
            continue
        net = bitmap.take_high(1, prefix)
        if net is None:
            raise ValueError(f"{pod_cidr} is full: no /{prefix} range left for API server {name!r}")
        result.apiservers[name] = net
        if not reason:
            result.added.append(f"apiserver/{name}")
    for name in node_names:
        if name in kept_nodes:
            result.nodes[name] = kept_nodes[name]
            if name not in old_nodes and not reason:
                result.added.append(name)  # back from `leaving`
            continue
        net = bitmap.take_low(prefix)
        if net is None:
            raise ValueError(f"{pod_cidr} is full: no /{prefix} range left for node {name!r}")
        result.nodes[name] = net
        if not reason:
            result.added.append(name)
    if not reason:
        result.released = sorted(set(old_nodes) - set(result.nodes)) + sorted(
            f"pool/{p}" for p in set(old_pools) - set(result.pools)
        ) + sorted(f"apiserver/{m}" for m in set(old_members) - set(result.apiservers))
    return result


def _pool_blocks(max_nodes: int) -> int:
    return 2 ** math.ceil(math.log2(max(1, max_nodes)))
