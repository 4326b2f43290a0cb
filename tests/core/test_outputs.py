"""The outputs contract as the lab's stand-in and the printers use it: validate, split, redact, write, read."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from skyrack import outputs as contract
from skyrack.errors import InputError

LAB = {"apiserver_endpoint": "https://198.18.0.36:6443", "ca_cert_hash": "sha256:" + "0f" * 32,
       "bootstrap_token": "abcdef.0123456789abcdef", "admin_kubeconfig": "apiVersion: v1\nkind: Config\n"}


def test_the_lab_stand_in_writes_what_the_join_reads(tmp_path: Path) -> None:
    path = tmp_path / "outputs.json"
    contract.write_file(path, LAB)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert contract.load(path) == LAB
    assert [p.name for p in tmp_path.iterdir()] == ["outputs.json"]


def test_the_stand_in_must_write_every_output_it_promises(tmp_path: Path) -> None:
    path = tmp_path / "outputs.json"
    with pytest.raises(InputError) as exc:
        contract.write_file(path, {k: v for k, v in LAB.items() if k != "admin_kubeconfig"})
    assert [str(p) for p in exc.value.problems] == [f"{path}: admin_kubeconfig: required but missing"]
    assert not path.exists()


def test_secrecy_is_declared_not_guessed() -> None:
    public, secret = contract.split_secrets(LAB)
    assert set(secret) == {"bootstrap_token", "admin_kubeconfig"}
    assert set(public) == {"apiserver_endpoint", "ca_cert_hash"}
    shown = contract.redacted({**LAB, "vpn_shared_key": "k", "vpn_gateway_ip": None})
    assert shown["admin_kubeconfig"] == shown["bootstrap_token"] == shown["vpn_shared_key"] == "[secret]"
    assert shown["ca_cert_hash"] == LAB["ca_cert_hash"] and shown["vpn_gateway_ip"] is None
    assert {n for n, o in contract.CONTRACT.items() if o.secret} == {
        "bootstrap_token", "admin_kubeconfig", "vpn_shared_key", "admin_ssh_private_key", "autoscaler_credentials",
        "pool_bootstrap_token"}


def test_every_consumer_reads_declared_outputs_only() -> None:
    for names in (contract.JOIN_REQUIRED, contract.CLUSTER_LAYER_REQUIRED, contract.LAB_STAND_IN):
        assert contract.undeclared(names) == []
