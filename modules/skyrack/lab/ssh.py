"""SSH material for reaching lab nodes with host keys checked: a key, known_hosts and a config.

Ansible (and a person: ``ssh -F <state>/ssh/config r01-n01``) use the config, which
pins `StrictHostKeyChecking yes` to a known_hosts file holding exactly the host keys
`lab up` generated for each node.
"""

from __future__ import annotations

import subprocess

from .state import Host, Paths


def ensure_key(paths: Paths) -> str:
    """Create the lab's client key once; return its public half."""
    paths.ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not paths.key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "skyrack-lab", "-f", str(paths.key)],
                       check=True, capture_output=True)
    return paths.key.with_suffix(".pub").read_text()


def write(paths: Paths, hosts: list[Host], keys: dict[str, list[str]]) -> None:
    """known_hosts (name and address of every node) and an ssh_config naming every node."""
    lines = [f"{h.name},{h.ip} {key}" for h in hosts for key in keys.get(h.name, [])]
    paths.known_hosts.write_text("\n".join(lines) + "\n")
    common = [
        "User root",
        f"IdentityFile {paths.key}",
        "IdentitiesOnly yes",
        f"UserKnownHostsFile {paths.known_hosts}",
        "StrictHostKeyChecking yes",
        "GlobalKnownHostsFile /dev/null",
        "ConnectTimeout 5",
    ]
    blocks = [f"Host {h.name}\n  HostName {h.ip}\n" for h in hosts]
    paths.ssh_config.write_text("# Written by `skyrack lab up`.\n" + "".join(blocks) + "\nHost *\n"
                                + "".join(f"  {c}\n" for c in common))


def run(paths: Paths, host: str, command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a command on a lab node over SSH (host keys checked)."""
    return subprocess.run(["ssh", "-F", str(paths.ssh_config), "-o", "BatchMode=yes", host, command],
                          capture_output=True, text=True, timeout=timeout, check=False)
