"""Keep a test lab's bridge traffic flowing while other labs start and stop on the same host.

A lab whose code predates subnet-scoped rules inserts `DROP 198.18.0.0/15 ! -o <its bridge>`
at the top of mangle FORWARD, which also drops frames bridged between *this* lab's
nodes (br_netfilter). This keeper moves this lab's own ACCEPT back to the top.
"""

from __future__ import annotations

import subprocess
import threading

from skyrack.lab import network


def accept_rule(bridge: str, subnet: str) -> list[str]:
    return next(r for r in network.forward_rules(bridge, subnet) if "ACCEPT" in r)


def accept_first(bridge: str, subnet: str) -> bool:
    """Move this lab's ACCEPT to the top of mangle FORWARD; True if it had to move."""
    rule = accept_rule(bridge, subnet)
    listing = subprocess.run(["iptables", "-w", "-t", "mangle", "-S", "FORWARD"], capture_output=True, text=True,
                             check=False).stdout.splitlines()
    first = next((line for line in listing if line.startswith("-A FORWARD")), "")
    if f"-i {bridge} -o {bridge}" in first and "ACCEPT" in first:
        return False
    subprocess.run(["iptables", "-w", "-t", "mangle", "-D", *rule], capture_output=True, check=False)
    subprocess.run(["iptables", "-w", "-t", "mangle", "-I", "FORWARD", "1", *rule[1:]], capture_output=True, check=True)
    return True


class Keeper:
    def __init__(self, bridge: str, subnet: str, every: float = 1.0):
        self.bridge, self.subnet, self.every = bridge, subnet, every
        self.stop = threading.Event()
        self.moves = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.moves += accept_first(self.bridge, self.subnet)

    def __enter__(self) -> Keeper:
        accept_first(self.bridge, self.subnet)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
