"""A node cut off from the control plane, and lookups watched through it: shared by the lab test
(tests/lab/test_kubernetes_dns.py, a short cut) and bench/dns_outage.py (the issue's ten minutes).

The cut is iptables inside the lab node (its own network namespace, as a site's lost uplink would be seen
from the node), never the host's; every packet between the node and the API servers' addresses is
dropped both ways, and only those: the node still reaches the other racks' nodes and pods.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path

from skyrack import plan as planmod
from skyrack.kube import health

Ssh = Callable[[str, str], str]
TAG = "skyrack-test-cut"


def control_plane_addresses(p: planmod.Plan) -> list[str]:
    """Where a node reaches the control plane: every API server, and the load balancer if there is one."""
    out = [m.ip for m in p.members_of("apiserver")]
    lb = p.apiserver_endpoint.removeprefix("https://").split(":")[0]
    return sorted(set(out) | {lb})


def _rules(addresses: Sequence[str]) -> list[list[str]]:
    return [r for a in addresses for r in (["OUTPUT", "-d", a], ["INPUT", "-s", a])]


@contextmanager
def cut(ssh: Ssh, node: str, addresses: Sequence[str]):
    """Drop every packet between `node` and `addresses` until the block ends (then the rules go)."""
    comment = ["-m", "comment", "--comment", TAG, "-j", "DROP"]
    for chain, *match in _rules(addresses):
        ssh(node, shlex.join(["iptables", "-w", "-I", chain, "1", *match, *comment]))
    try:
        yield
    finally:
        for chain, *match in _rules(addresses):
            ssh(node, shlex.join(["iptables", "-w", "-D", chain, *match, *comment]) + " || true")


def lookup_loop(ssh_config: Path, node: str, server: str, names: Sequence[str], seconds: float,
                every: float = 2) -> subprocess.Popen[str]:
    """Start, on `node`, a lookup of each name at `server` every `every` s for `seconds` (one SSH session,
    the same query skyrack.kube.health sends); `lookups()` reads what it printed."""
    query = shlex.quote(health.DNS_QUERY)
    loop = (f"end=$(( $(date +%s) + {int(seconds)} )); while [ $(date +%s) -lt $end ]; do "
            f"for n in {' '.join(shlex.quote(n) for n in names)}; do "
            f"echo \"$(date +%s) $n $(python3 -c {query} $n {server} 2>&1 | tail -n 1)\"; done; sleep {every}; done")
    return subprocess.Popen(["ssh", "-F", str(ssh_config), "-o", "BatchMode=yes", node, loop],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def lookups(proc: subprocess.Popen[str], timeout: float) -> list[tuple[int, str, str]]:
    """(unix time, name, answer) for each lookup the loop made."""
    out, _ = proc.communicate(timeout=timeout)
    rows = []
    for line in out.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0].isdigit():
            rows.append((int(parts[0]), parts[1], parts[2]))
    return rows


def failures(rows: list[tuple[int, str, str]], want: dict[str, str]) -> list[str]:
    """Every lookup whose answer was not the name's address, as 't+N s name: answer'."""
    start = rows[0][0] if rows else 0
    return [f"t+{t - start} s {name}: {answer}" for t, name, answer in rows if answer != want[name]]


def wait_node_condition(ready: Callable[[], bool | None], want: bool, timeout: float) -> float:
    """Seconds until the node's Ready condition is `want` (polling); raises if it is not within timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if ready() is want:
            return time.monotonic() - start
        time.sleep(3)
    raise AssertionError(f"the node's Ready was not {want} within {timeout:.0f} s")
