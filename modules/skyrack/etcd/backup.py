"""etcd snapshots in the environment's Blob container: streamed up, listed, fetched for a restore.

Blob names are `<environment>/<cluster>/<UTC time>.db`; each carries its SHA-256 and
the cluster revision as metadata (the members' own snapshot timer writes the same). In
Azure the container is the one the stack makes; its account takes **no shared keys**
(`allowSharedKeyAccess: false`), so an account key or a key-signed SAS is refused there.
Set `SKYRACK_BACKUP_CONTAINER_URL` to the stack output `backup_container_url` and sign in
with Azure AD (`az login`, a managed identity, or `AZURE_CLIENT_ID`/`AZURE_TENANT_ID`/
`AZURE_CLIENT_SECRET`: azure-identity's DefaultAzureCredential); the principal needs
Storage Blob Data Contributor on the container (stack config `skyrack:backupOperators`)
and a public address in `azure.admin_cidrs` (the account's firewall). A connection string
in `AZURE_STORAGE_CONNECTION_STRING` (a user-delegation SAS) still works. In a lab
environment the default is the lab's Azurite.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.core.pipeline.transport import RequestsTransport
from azure.storage.blob import BlobServiceClient, ContainerClient

from .. import azurite
from ..errors import InputError, Problem
from ..plan import Plan

CONN_ENV = "AZURE_STORAGE_CONNECTION_STRING"
URL_ENV = "SKYRACK_BACKUP_CONTAINER_URL"  # the stack output backup_container_url: Azure AD, no shared key


@dataclass(frozen=True)
class Snapshot:
    name: str
    size: int
    sha256: str
    revision: int | None
    created: str


def connection_string(plan: Plan, given: str | None = None) -> str:
    conn = given or os.environ.get(CONN_ENV)
    if conn:
        return conn
    if plan.env.lab is not None:
        return azurite.connection_string(str(plan.env.lab.host_ip))
    raise InputError([Problem(str(plan.source), "backups",
                              f"no Blob Storage access: set {URL_ENV} to the stack output backup_container_url "
                              "and sign in with Azure AD (the account takes no shared keys), or set "
                              f"{CONN_ENV} / pass --blob-connection-string (a user-delegation SAS)")])


def container(plan: Plan, conn: str | None = None) -> ContainerClient:
    url = os.environ.get(URL_ENV)
    if url and not (conn or os.environ.get(CONN_ENV)):
        from azure.identity import DefaultAzureCredential

        # The stack made the container; creating one would need a role on the whole account.
        return ContainerClient.from_container_url(url.rstrip("/"), credential=DefaultAzureCredential())
    # Azurite on the lab host: straight there, never through a proxy from the environment variables.
    lab = plan.env.lab is not None and not (conn or os.environ.get(CONN_ENV))
    transport = RequestsTransport(use_env_settings=False) if lab else None
    service = BlobServiceClient.from_connection_string(connection_string(plan, conn), transport=transport)
    c = service.get_container_client(plan.env.backups.container)
    try:
        c.create_container()  # Azure: the stack made it already; Azurite starts empty
    except ResourceExistsError:
        pass
    return c


def blob_name(plan: Plan, cluster: str, now: dt.datetime | None = None) -> str:
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{plan.env.name}/{cluster}/{stamp}.db"


def upload(c: ContainerClient, name: str, chunks: Iterable[bytes], revision: int | None) -> Snapshot:
    """Stream `chunks` into a block blob (never held in memory or on disk as a whole)."""
    digest, size = hashlib.sha256(), 0

    def counted() -> Iterator[bytes]:
        nonlocal size
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
            yield chunk

    blob = c.get_blob_client(name)
    blob.upload_blob(counted(), blob_type="BlockBlob", overwrite=False)
    meta = {"sha256": digest.hexdigest(), "revision": str(revision or "")}
    blob.set_blob_metadata(meta)
    return Snapshot(name, size, meta["sha256"], revision, dt.datetime.now(dt.UTC).isoformat())


def listing(c: ContainerClient, prefix: str) -> list[Snapshot]:
    out = []
    for b in c.list_blobs(name_starts_with=prefix, include=["metadata"]):
        meta = b.metadata or {}
        rev = meta.get("revision")
        out.append(Snapshot(b.name, b.size, meta.get("sha256", ""), int(rev) if rev else None,
                            b.creation_time.isoformat() if b.creation_time else ""))
    return sorted(out, key=lambda s: s.name)


def download(c: ContainerClient, name: str, dest: Path) -> Snapshot:
    """Fetch a snapshot to `dest` and check it against the SHA-256 recorded at upload."""
    blob = c.get_blob_client(name)
    try:
        props = blob.get_blob_properties()
    except ResourceNotFoundError:
        raise InputError([Problem(name, "", f"no such snapshot in container {c.container_name}")]) from None
    digest = hashlib.sha256()
    with dest.open("wb") as f:
        for chunk in blob.download_blob().chunks():
            digest.update(chunk)
            f.write(chunk)
    want = (props.metadata or {}).get("sha256")
    if want and want != digest.hexdigest():
        raise RuntimeError(f"{name}: downloaded SHA-256 {digest.hexdigest()} does not match the recorded {want}")
    rev = (props.metadata or {}).get("revision")
    return Snapshot(name, props.size, digest.hexdigest(), int(rev) if rev else None, str(props.creation_time))
