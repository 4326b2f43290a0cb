"""Azurite, the Azure Blob Storage emulator: where etcd snapshots go in tests and in the lab.

Installed by `./dev setup` into `scripts/npm-tools/` (`npm install azurite@3`). It only
ever listens on a loopback or lab-host address given by the caller, keeps its blobs in
`location`, and is reached with the emulator's published development account
(`devstoreaccount1`; its key is documented by Microsoft and is no secret).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "scripts" / "npm-tools"
BIN = Path(os.environ.get("SKYRACK_AZURITE", TOOLS / "node_modules" / ".bin" / "azurite-blob"))
PORT = 10000
ACCOUNT = "devstoreaccount1"
# The well-known key of Azurite's development account (https://learn.microsoft.com/azure/storage/common/storage-use-azurite).
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class AzuriteError(RuntimeError):
    """Azurite is not installed or did not start."""


@dataclass(frozen=True)
class Azurite:
    host: str
    port: int
    pid: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return connection_string(self.host, self.port)


def connection_string(host: str, port: int = PORT) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint=http://{host}:{port}/{ACCOUNT};")


def installed() -> bool:
    return BIN.exists()


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        return b"azurite" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def start(host: str, port: int, location: Path, log: Path, timeout: float = 30) -> Azurite:
    """Start azurite-blob on host:port (its own session, so it outlives the caller) and wait for it."""
    if not installed():
        raise AzuriteError(f"azurite is not installed ({BIN}); `./dev setup` installs it")
    location.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen([str(BIN), "--blobHost", host, "--blobPort", str(port), "--location", str(location),
                                 "--skipApiVersionCheck", "--loose", "--silent"],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AzuriteError(f"azurite exited at start (code {proc.returncode}); see {log}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return Azurite(host, port, proc.pid)
        except OSError:
            time.sleep(0.2)
    stop(proc.pid)
    raise AzuriteError(f"azurite did not listen on {host}:{port} within {timeout:.0f} s; see {log}")


def stop(pid: int | None, timeout: float = 10) -> None:
    if not alive(pid):
        return
    assert pid is not None
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    if alive(pid):
        os.killpg(pid, signal.SIGKILL)
