"""Storage for etcd snapshots: a private, zone-redundant storage account and container.

Only the etcd members write, with their VMs' managed identities (Storage Blob Data
Contributor on the container; no account keys), and operators listed in stack config
`skyrack:backupOperators` (principal IDs) get the same role for `skyrack etcd
snapshot|restore`. Blobs older than `backups.retention_days` are deleted by a lifecycle
rule. Taking the snapshots is the members' job (a timer in their cloud-init, which gets
`container_url`), not this module's. The account comes first (the members' user-data names
it) and the writers' role assignments after the VMs (`grant`).
"""

from __future__ import annotations

import ipaddress
import re

import pulumi
from pulumi_azure_native import storage

from . import rbac
from .context import Context


def ip_rule(net: ipaddress.IPv4Network) -> str:
    """A Storage firewall entry: a single address is written without /32 (Storage refuses /31 and /32)."""
    return str(net.network_address) if net.prefixlen == 32 else str(net)


class EtcdBackups(pulumi.ComponentResource):
    def __init__(self, name: str, ctx: Context, writer_subnet_ids: list[pulumi.Input[str]],
                 opts: pulumi.ResourceOptions | None = None):
        """`writer_subnet_ids`: the subnets the members' snapshots come from (service endpoint)."""
        super().__init__("skyrack:azure:EtcdBackups", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        env = ctx.plan.env
        # No account_name: Pulumi auto-names it (global, 3-24 lowercase letters and digits).
        self.account = storage.StorageAccount(
            re.sub(r"[^a-z0-9]", "", env.name)[:10] + "etcdbak", kind="StorageV2", sku={"name": "Standard_ZRS"},
            access_tier="Hot",
            allow_blob_public_access=False, allow_shared_key_access=False, minimum_tls_version="TLS1_2",
            enable_https_traffic_only=True, default_to_o_auth_authentication=True,
            network_rule_set={"default_action": "Deny", "bypass": "AzureServices",
                              "virtual_network_rules": [{"virtual_network_resource_id": s, "action": "Allow"}
                                                        for s in writer_subnet_ids],
                              "ip_rules": [{"i_p_address_or_range": ip_rule(c), "action": "Allow"}
                                           for c in env.azure.public_admin_networks]},
            **ctx.common(), opts=child)
        container = env.backups.container
        self.container = storage.BlobContainer(
            "etcd-snapshots", container_name=container, account_name=self.account.name, public_access="None",
            resource_group_name=ctx.resource_group, opts=child)
        expire = {"delete": {"days_after_modification_greater_than": env.backups.retention_days}}
        storage.ManagementPolicy(
            "snapshot-retention", management_policy_name="default", account_name=self.account.name,
            resource_group_name=ctx.resource_group,
            policy={"rules": [{"name": "expire-etcd-snapshots", "enabled": True, "type": "Lifecycle", "definition": {
                "filters": {"blob_types": ["blockBlob"], "prefix_match": [f"{container}/"]},
                "actions": {"base_blob": expire},
            }}]}, opts=child)
        self._role = rbac.role_id(ctx, rbac.BLOB_DATA_CONTRIBUTOR)
        self.container_url: pulumi.Output[str] = pulumi.Output.concat(
            self.account.primary_endpoints.apply(lambda e: (e.blob if e else "") or ""), container)
        self.register_outputs({"container_url": self.container_url})

    def grant(self, who: str, principal: pulumi.Input[str], principal_type: str = "ServicePrincipal") -> None:
        """Storage Blob Data Contributor on the container: a member's VM identity, or an operator (`User`, `Group`)."""
        rbac.grant(f"backup-writer-{who}", self.container.id, principal, self._role, self, principal_type)
