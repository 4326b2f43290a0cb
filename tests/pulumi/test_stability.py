"""`pulumi up` twice makes no new key: the PKI provider's diff keeps what state holds."""

from __future__ import annotations

from harness import DYNAMIC, AzureMocks, StackRun, run_stack

from skyrack.azure.pki import PkiProvider


def test_second_run_keeps_every_key_and_every_vm(dev: StackRun) -> None:
    again = run_stack("dev", mocks=AzureMocks(prior=dev.pki_state()))
    assert again.pki_state() == dev.pki_state()
    before = {vm.name: vm.plain for vm in dev.of_type("compute:VirtualMachine")}
    after = {vm.name: vm.plain for vm in again.of_type("compute:VirtualMachine")}
    assert after == before  # same user-data: nothing to update on any VM
    assert again.outputs["ca_cert_hash"] == dev.outputs["ca_cert_hash"]
    assert again.outputs["bootstrap_token"] == dev.outputs["bootstrap_token"]


def test_a_certificate_is_reissued_only_when_what_it_certifies_changes(dev: StackRun) -> None:
    provider = PkiProvider()
    cert = next(r for r in dev.resources if r.typ == DYNAMIC + "Certificate" and r.name == "etcd-0-peer")
    old = cert.state
    unchanged = {**cert.plain, "__provider": "a different serialisation of the provider"}
    assert not provider.diff("id", old, unchanged).changes
    moved = {**cert.plain, "ips": ["10.0.0.99", "127.0.0.1"]}
    assert provider.diff("id", old, moved).replaces == ["ips"]
    new_ca = {**cert.plain, "ca_cert_pem": "another CA"}
    assert provider.diff("id", old, new_ca).replaces == ["ca_cert_pem"]
