"""A control-plane VM: a NIC with the member's static address and a Debian 12 VM in its zone.

Debian 12 because the etcd members run Debian's etcd-server package, as the lab does.
The VM boots from cloud-init user-data rendered by `skyrack.render.cloud_init`; later
changes to that text, or to its size, do not touch a running member (`ignore_changes`):
`pulumi up` would apply them to every member at once (a resize restarts each VM and may
reallocate it, and an etcd member's local NVMe does not survive that: every member of a
cluster empty together). Roll members one at a time with `pulumi up --replace <urn>`
(see docs/azure.md); the new VM gets the current size and user-data.

Replacing one member must work with fixed names and a fixed address: the VM is deleted
before its replacement is created (`delete_before_replace`: its name and OS disk name are
free again), and its NIC is a Pulumi resource that outlives it (`deleteOption: Detach`),
so the new VM takes over the same NIC, private address, load-balancer membership and DNS
record. Azure deleting the NIC with the VM (`Delete`) would leave Pulumi's state pointing
at a NIC that no longer exists.
"""

from __future__ import annotations

import base64

import pulumi
from pulumi_azure_native import compute, network

from ..plan import Member
from .context import Context

DEBIAN_12 = {"publisher": "Debian", "offer": "debian-12", "sku": "12-gen2", "version": "latest"}
ADMIN_USER = "skyrack"
# What `pulumi up` never changes on a running member: roll those one member at a time by replacement.
ROLLED_BY_REPLACEMENT = ("osProfile.customData", "hardwareProfile.vmSize")
CUSTOM_DATA_LIMIT = 65535  # bytes of user-data Azure accepts, decoded ("at most 65535 bytes" in the VM API)


def custom_data(user_data: str) -> str:
    raw = user_data.encode()
    if len(raw) > CUSTOM_DATA_LIMIT:
        raise ValueError(f"cloud-init user-data is {len(raw)} bytes; Azure accepts at most {CUSTOM_DATA_LIMIT}")
    return base64.b64encode(raw).decode()


def linux_configuration(ssh_public_key: pulumi.Input[str]) -> dict[str, object]:
    return {"disable_password_authentication": True, "provision_vm_agent": True,
            "ssh": {"public_keys": [{"path": f"/home/{ADMIN_USER}/.ssh/authorized_keys", "key_data": ssh_public_key}]}}


def control_plane_vm(ctx: Context, member: Member, subnet_id: pulumi.Input[str], user_data: pulumi.Output[str],
                     ssh_public_key: pulumi.Input[str], parent: pulumi.Resource,
                     backend_pool_id: pulumi.Input[str] | None = None,
                     depends_on: list[pulumi.Resource] | None = None,
                     boot_after: list[pulumi.Resource] | None = None,
                     identities: list[pulumi.Input[str]] | None = None) -> compute.VirtualMachine:
    """`boot_after`: what the first boot needs in place (the VPN connection, on-prem DNS forwarding).
    `identities`: user-assigned managed identities (resource IDs) the VM carries besides its own.
    A member with a pod range (an API server) gets IP forwarding on its NIC: Azure delivers it the packets
    the route table sends to its pods (azure.network)."""
    name = f"{ctx.prefix}-{member.name}"
    ip_config: dict[str, object] = {"name": "primary", "primary": True, "private_ip_allocation_method": "Static",
                                    "private_ip_address": member.ip, "subnet": {"id": subnet_id}}
    if backend_pool_id is not None:
        ip_config["load_balancer_backend_address_pools"] = [{"id": backend_pool_id}]
    nic = network.NetworkInterface(
        f"{member.name}-nic", network_interface_name=f"{name}-nic", enable_accelerated_networking=True,
        enable_ip_forwarding=member.pod_cidr is not None,
        ip_configurations=[ip_config], **ctx.common(),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on or []))
    return compute.VirtualMachine(
        member.name, vm_name=name, zones=[member.zone] if member.zone else None,
        hardware_profile={"vm_size": member.vm_size},
        os_profile={"computer_name": member.name, "admin_username": ADMIN_USER,
                    "custom_data": user_data.apply(custom_data),
                    "linux_configuration": linux_configuration(ssh_public_key)},
        storage_profile={"image_reference": DEBIAN_12,
                         "os_disk": {"name": f"{name}-os", "create_option": "FromImage", "caching": "ReadWrite",
                                     "disk_size_gb": 64, "delete_option": "Delete",
                                     "managed_disk": {"storage_account_type": "Premium_LRS"}}},
        network_profile={"network_interfaces": [{"id": nic.id, "primary": True, "delete_option": "Detach"}]},
        diagnostics_profile={"boot_diagnostics": {"enabled": True}},  # boot log (cloud-init output), serial console
        identity={"type": "SystemAssigned, UserAssigned", "user_assigned_identities": identities} if identities
        else {"type": "SystemAssigned"},
        **ctx.common(),
        opts=pulumi.ResourceOptions(parent=parent, ignore_changes=list(ROLLED_BY_REPLACEMENT),
                                    delete_before_replace=True, depends_on=boot_after or []))
