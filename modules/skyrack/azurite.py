"""Azurite, the Azure Blob Storage emulator: where etcd snapshots go in tests and in the lab.

Installed by `./dev setup` into `scripts/npm-tools/` (`npm install azurite@3`); an installed
skyrack uses `$SKYRACK_AZURITE` or the `azurite-blob` on PATH (skyrack.resources). It only
ever listens on a loopback or lab-host address given by the caller, keeps its blobs in
`location`, and is reached with the emulator's published development account
(`devstoreaccount1`; its key is documented by Microsoft and is no secret).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import daemon, resources

BIN = resources.azurite_bin()
PORT = 10000
MARKER = "azurite"  # in its command line: how a PID is known to be Azurite
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
    return daemon.alive(pid, MARKER)


def start(host: str, port: int, location: Path, log: Path, timeout: float = 30) -> Azurite:
    """Start azurite-blob on host:port (its own session, so it outlives the caller) and wait for it."""
    if not installed():
        raise AzuriteError(f"azurite is not installed ({BIN}); `./dev setup` installs it")
    location.mkdir(parents=True, exist_ok=True)
    pid = daemon.start([str(BIN), "--blobHost", host, "--blobPort", str(port), "--location", str(location),
                        "--skipApiVersionCheck", "--loose", "--silent"],
                       name="azurite", listen=(host, port), log=log, timeout=timeout, error=AzuriteError)
    return Azurite(host, port, pid)


def stop(pid: int | None, timeout: float = 10) -> None:
    daemon.stop(pid, MARKER, timeout)
