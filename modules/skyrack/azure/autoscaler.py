"""cluster-autoscaler's Azure identity: a user-assigned managed identity that may scale the cloud pools and no more.

The cluster layer runs the autoscaler on the API-server VMs (``skyrack.kube.autoscaler``: pinned to
the control-plane nodes, host network), so the identity is attached to those VMs and nowhere else:
the autoscaler gets its tokens from the VM's metadata service (IMDS, 169.254.169.254), there is no
client secret to store, rotate or leak, and neither a cloud-pool node (where jobs run) nor an on-prem
node (which has no IMDS) can use it. What it may do, each on the narrowest scope that works:

* **Virtual Machine Contributor on each pool's scale set**: read it and its instances, change its
  capacity, delete instances (scale-down).
* **Virtual Machine Contributor on each pool's subnet**: the autoscaler scales by writing the whole
  scale-set model back, and Azure then checks ``Microsoft.Network/virtualNetworks/subnets/join/action``
  on the subnet the model names (a LinkedAuthorizationFailed otherwise). On a subnet that join, and
  reading the VNet, are all this role's actions reach.
* **A custom role that only reads scale sets, on the resource group**: the autoscaler lists the scale
  sets of its resource group (``ARM_RESOURCE_GROUP``) to find node groups and their tags, and Azure
  authorises a list on the scope listed. No built-in role reads scale sets alone (Reader reads every
  resource), so the environment defines one, assignable in its own resource group only.

``credentials`` is the stack output ``autoscaler_credentials``: cluster-autoscaler's ARM_* settings
for a user-assigned managed identity, no secret among them (the contract keeps the output secret).
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import authorization, managedidentity

from . import rbac
from .context import Context

SCALE_SET_READER_ACTIONS = ("Microsoft.Compute/virtualMachineScaleSets/read",)


class AutoscalerIdentity(pulumi.ComponentResource):
    def __init__(self, name: str, ctx: Context, opts: pulumi.ResourceOptions | None = None):
        """The identity and its resource-group role; `grant` adds each pool once its scale set exists."""
        super().__init__("skyrack:azure:AutoscalerIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.identity = managedidentity.UserAssignedIdentity(
            "autoscaler-identity", resource_name_=f"{ctx.prefix}-autoscaler", **ctx.common(), opts=child)
        self.id: pulumi.Output[str] = self.identity.id  # what the API-server VMs carry
        self._principal = self.identity.principal_id
        self._vm_contributor = rbac.role_id(ctx, rbac.VM_CONTRIBUTOR)
        group = ctx.group_id
        guid = rbac.stable_guid("role-definition", group, "scale-set-reader")
        reader = authorization.RoleDefinition(
            "autoscaler-scale-set-reader", role_definition_id=guid, scope=group, assignable_scopes=[group],
            # the display name is unique in the tenant: the GUID tells two environments (or subscriptions) apart
            role_name=pulumi.Output.concat(f"{ctx.prefix} scale-set reader ", guid),
            description=f"cluster-autoscaler of {ctx.prefix}: list the scale sets of the resource group (skyrack)",
            permissions=[{"actions": list(SCALE_SET_READER_ACTIONS)}], role_type="CustomRole", opts=child)
        rbac.grant("autoscaler-list-scale-sets", group, self._principal, rbac.role_id(ctx, reader.name), self)
        self.credentials: pulumi.Output[dict[str, str]] = pulumi.Output.all(
            self.identity.client_id, ctx.subscription_id, ctx.resource_group).apply(lambda v: {
                "ARM_USE_MANAGED_IDENTITY_EXTENSION": "true",  # tokens from IMDS, for the identity named next
                "ARM_USER_ASSIGNED_IDENTITY_ID": v[0],  # its client ID
                "ARM_SUBSCRIPTION_ID": v[1],
                "ARM_RESOURCE_GROUP": v[2],
            })
        self.register_outputs({"id": self.id})

    def grant(self, pool: str, scale_set_id: pulumi.Input[str], subnet_id: pulumi.Input[str]) -> None:
        """Scale this pool: Virtual Machine Contributor on its scale set, and on its subnet for the join."""
        rbac.grant(f"autoscaler-{pool}-scale-set", scale_set_id, self._principal, self._vm_contributor, self)
        rbac.grant(f"autoscaler-{pool}-subnet", subnet_id, self._principal, self._vm_contributor, self)
