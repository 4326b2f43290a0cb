"""Snapshots in Blob Storage (a real Azurite on loopback) and the etcd command line's refusals, without a lab."""

from __future__ import annotations

import etcdlab
import pytest
from etcdlab import CONFIGS, run_cli

from skyrack import plan as planmod
from skyrack.errors import InputError
from skyrack.etcd import backup

local_azurite = etcdlab.local_azurite


@pytest.fixture
def plan(tmp_path):
    return planmod.make(etcdlab.write_env(tmp_path / "configs", "blobtest", "skyetcd8", 8, 3, False))


def test_snapshots_stream_up_list_and_come_back_checked(plan, local_azurite, tmp_path):
    c = backup.container(plan, local_azurite.connection_string)
    chunks = [bytes([i]) * 65536 for i in range(40)]  # 2.5 MiB in pieces, as etcd streams it
    first = backup.upload(c, backup.blob_name(plan, "etcd"), iter(chunks), revision=42)
    second = backup.upload(c, backup.blob_name(plan, "etcd"), iter([b"later"]), revision=43)
    assert first.size == 40 * 65536
    assert [s.name for s in backup.listing(c, "blobtest/etcd/")] == [first.name, second.name]
    assert backup.listing(c, "blobtest/etcd/")[0].revision == 42
    got = backup.download(c, first.name, tmp_path / "snap.db")
    assert (tmp_path / "snap.db").read_bytes() == b"".join(chunks) and got.sha256 == first.sha256


def test_a_damaged_snapshot_is_refused(plan, local_azurite, tmp_path):
    c = backup.container(plan, local_azurite.connection_string)
    snap = backup.upload(c, backup.blob_name(plan, "etcd"), iter([b"x" * 1000]), revision=1)
    c.get_blob_client(snap.name).upload_blob(b"y" * 1000, overwrite=True, metadata={"sha256": snap.sha256})
    with pytest.raises(RuntimeError, match="does not match"):
        backup.download(c, snap.name, tmp_path / "snap.db")
    with pytest.raises(InputError, match="no such snapshot"):
        backup.download(c, "blobtest/etcd/nothing.db", tmp_path / "none.db")


def test_outside_a_lab_credentials_must_be_given(plan, monkeypatch):
    monkeypatch.delenv(backup.CONN_ENV, raising=False)
    with pytest.raises(InputError, match=backup.CONN_ENV):
        backup.connection_string(planmod.make(CONFIGS / "prod.yaml"))
    assert "devstoreaccount1" in backup.connection_string(plan)  # a lab: its Azurite
    monkeypatch.setenv(backup.CONN_ENV, "BlobEndpoint=https://example.invalid/;SharedAccessSignature=sv=x")
    assert backup.connection_string(plan).startswith("BlobEndpoint=https://example.invalid/")


def test_etcd_commands_need_a_client_certificate_outside_a_lab(env_copy):
    r = run_cli("etcd", "status", str(env_copy("dev")))
    assert r.returncode == 1 and "--pki-dir" in r.stderr and "Traceback" not in r.stderr


def test_etcd_commands_on_a_lab_that_is_not_up(tmp_path):
    path = etcdlab.write_env(tmp_path / "configs", "notup", "skyetcd7", 7, 3, False)
    r = run_cli("etcd", "snapshot", str(path))
    assert r.returncode == 1 and "etcd lab-up" in r.stderr and "Traceback" not in r.stderr
