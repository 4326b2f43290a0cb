"""A Key Vault for bootstrap material: the worker join token, the CA keys, the VPN key.

Pulumi state already holds these as secrets; the vault is where people and machines
outside Pulumi read them (RBAC authorisation, so access is an Azure role assignment,
not a vault policy). Data-plane access only from the public `azure.admin_cidrs` and
Azure services; secrets are written through Azure Resource Manager.
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import keyvault

from .context import Context


class Vault(pulumi.ComponentResource):
    def __init__(self, name: str, ctx: Context, secrets: dict[str, pulumi.Input[str]],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("skyrack:azure:Vault", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        env = ctx.plan.env
        # No vault_name: Pulumi auto-names it (names are global and at most 24 characters).
        self.vault = keyvault.Vault(
            f"{env.name}kv", properties={
                "tenant_id": ctx.tenant_id, "sku": {"family": "A", "name": "standard"},
                "enable_rbac_authorization": True, "enable_soft_delete": True, "soft_delete_retention_in_days": 90,
                "enable_purge_protection": True,
                "network_acls": {"default_action": "Deny", "bypass": "AzureServices",
                                 "ip_rules": [{"value": str(c)} for c in env.azure.public_admin_networks]},
            }, **ctx.common(), opts=child)
        # A secret is written through Azure Resource Manager, which has no delete for one: the provider deletes
        # through the vault's data plane, which the firewall (public admin_cidrs only) and RBAC (no data role
        # for the deployer) deny, so removing a pool or `destroy` failed there. Pulumi forgets a removed secret
        # instead (retain_on_delete); `destroy` deletes the vault, through ARM, with every secret in it, and a
        # secret left by a removed pool is deleted by hand (docs/azure.md "Operating it").
        kept = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        for secret_name, value in secrets.items():
            keyvault.Secret(f"kv-{secret_name}", secret_name=secret_name, vault_name=self.vault.name,
                            properties={"value": pulumi.Output.secret(value)},
                            resource_group_name=ctx.resource_group, tags=ctx.tags, opts=kept)
        self.uri: pulumi.Output[str] = self.vault.properties.apply(lambda p: p.vault_uri or "")
        self.register_outputs({"uri": self.uri})
