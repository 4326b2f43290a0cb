"""Steps that must run on a member itself (restore, rejoin): shell scripts over SSH, host keys checked.

The script goes on stdin, so nothing is quoted twice; it runs as root (through `sudo -n`
when the SSH user is not root, as on the Azure VMs' admin user).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

RUN_AS_ROOT = 'if [ "$(id -u)" = 0 ]; then exec sh -es; else exec sudo -n sh -es; fi'


class RemoteError(RuntimeError):
    pass


@dataclass(frozen=True)
class Ssh:
    config: Path  # an ssh_config naming every member (the lab writes one; StrictHostKeyChecking yes)

    def run(self, host: str, script: str, timeout: float = 300) -> str:
        proc = subprocess.run(["ssh", "-F", str(self.config), "-o", "BatchMode=yes", host, RUN_AS_ROOT],
                              input=script, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RemoteError(f"{host}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-500:]}")
        return proc.stdout

    def upload(self, host: str, local: Path, remote: str, timeout: float = 300) -> None:
        with local.open("rb") as f:
            proc = subprocess.run(["ssh", "-F", str(self.config), "-o", "BatchMode=yes", host,
                                   f"umask 077; cat > {remote}"], stdin=f, capture_output=True, timeout=timeout,
                                  check=False)
        if proc.returncode != 0:
            raise RemoteError(f"{host}: upload to {remote} failed: {proc.stderr.decode().strip()[-300:]}")
