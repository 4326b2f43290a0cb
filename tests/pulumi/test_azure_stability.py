"""`pulumi up` twice makes no new key: the PKI provider's diff keeps what state holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pulumi.dynamic.dynamic import serialize_provider
from pulumi_harness import DYNAMIC, AzureMocks, StackRun, run_stack

from skyrack.azure.pki import _PROVIDER, PkiProvider


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


def test_the_provider_travels_to_pulumis_dynamic_provider_process(tmp_path) -> None:
    """Pulumi pickles the provider (dill) into state and runs it in another process: do exactly that."""
    blob = tmp_path / "provider.b64"
    blob.write_text(serialize_provider(_PROVIDER))
    code = ("import base64, sys, dill; p = dill.loads(base64.b64decode(open(sys.argv[1]).read())); "
            "r = p.create({'kind': 'ca', 'common_name': 'x-ca'}); print(r.outs['cert_hash'])")
    modules = str(Path(__file__).resolve().parents[2] / "modules")
    out = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": modules})
    assert out.stdout.startswith("sha256:")


def test_role_assignment_names_are_stable_and_unique_per_subscription(dev: StackRun) -> None:
    """Names are GUIDs unique in the tenant: the same environment in two subscriptions must not collide."""
    names = lambda run: sorted(r.plain["roleAssignmentName"] for r in run.of_type("authorization:RoleAssignment"))  # noqa: E731
    roles = lambda run: [r.plain["roleDefinitionId"] for r in run.of_type("authorization:RoleDefinition")]  # noqa: E731
    again = run_stack("dev", mocks=AzureMocks(prior=dev.pki_state()))
    # 3 etcd members write backups; the autoscaler lists scale sets, and scales dev's one pool (scale set, subnet)
    assert names(again) == names(dev) and len(set(names(dev))) == len(names(dev)) == 3 + 1 + 2
    assert roles(again) == roles(dev) and len(roles(dev)) == 1  # its custom role: a GUID unique in the tenant too
    elsewhere = run_stack("dev", mocks=AzureMocks(subscription="22222222-2222-2222-2222-222222222222"))
    assert not set(names(elsewhere)) & set(names(dev))
    assert not set(roles(elsewhere)) & set(roles(dev))


def test_one_member_can_be_replaced_with_its_fixed_names_and_address(stack: StackRun) -> None:
    """`pulumi up --replace <urn of a VM>`: delete first (fixed names), keep the NIC (fixed IP, LB, DNS)."""
    vms = stack.of_type("compute:VirtualMachine")
    nics = {n.state["id"]: n for n in stack.of_type("network:NetworkInterface")}
    assert len(vms) == len(nics) > 0
    for vm in vms:
        opts = stack.options[("azure-native:compute:VirtualMachine", vm.name)]
        assert opts is not None and opts.delete_before_replace, vm.name  # its vmName and OS disk name are fixed
        # no rolling of several members by accident: new user-data, or a new size (`vm_size: auto` follows the node
        # count), would restart them all at once and, for etcd, empty every local NVMe together
        assert {"osProfile.customData", "hardwareProfile.vmSize"} <= set(opts.ignore_changes)
        (ref,) = vm.plain["networkProfile"]["networkInterfaces"]
        assert ref["deleteOption"] == "Detach", vm.name  # Pulumi owns the NIC; Azure must not delete it
        nic = nics[ref["id"]]
        nic_opts = stack.options[("azure-native:network:NetworkInterface", nic.name)]
        assert not (nic_opts and nic_opts.delete_before_replace)  # the NIC stays: same address for the new VM
    # The OS disk is the VM's own (not a Pulumi resource): deleted with it, recreated from the image.
    assert all(vm.plain["storageProfile"]["osDisk"]["deleteOption"] == "Delete" for vm in vms)
