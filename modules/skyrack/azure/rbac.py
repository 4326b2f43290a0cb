"""Azure role assignments as every component makes them: stable names, roles by ID, one scope each.

A role assignment's name is a GUID that must be unique in the tenant and the same on every run;
`grant` derives it from (scope, principal, role) as ARM templates do with `guid(...)`. Roles are
named by their definition's GUID (a built-in role's is the same in every tenant), never by display
name, which Azure may rename.
"""

from __future__ import annotations

import uuid

import pulumi
from pulumi_azure_native import authorization

from .context import Context

# Azure built-in roles (docs: "Azure built-in roles", the ID column).
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"  # Storage Blob Data Contributor
VM_CONTRIBUTOR = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"  # Virtual Machine Contributor


def stable_guid(kind: str, *parts: pulumi.Input[str]) -> pulumi.Output[str]:
    """A GUID for `kind` from `parts`, the same on every run (uuid5 of "skyrack/<kind>/<part>/<part>...")."""
    return pulumi.Output.all(*parts).apply(
        lambda v: str(uuid.uuid5(uuid.NAMESPACE_URL, f"skyrack/{kind}/" + "/".join(v))))


def assignment_name(scope: pulumi.Input[str], principal: pulumi.Input[str],
                    role: pulumi.Input[str]) -> pulumi.Output[str]:
    """A role assignment's name: a GUID unique in the tenant, the same on every run (ARM's `guid(scope, principal,
    role)`). The scope holds the subscription, so one environment in two subscriptions never collides, and a
    replaced VM (a new principal) gets a new assignment instead of a conflict with its predecessor's."""
    return stable_guid("role-assignment", scope, principal, role)


def role_id(ctx: Context, guid: pulumi.Input[str]) -> pulumi.Output[str]:
    """The full ID of a role definition (built-in, or custom with that GUID) in the environment's subscription."""
    return pulumi.Output.concat("/subscriptions/", ctx.subscription_id,
                                "/providers/Microsoft.Authorization/roleDefinitions/", guid)


def grant(name: str, scope: pulumi.Input[str], principal: pulumi.Input[str], role: pulumi.Input[str],
          parent: pulumi.Resource, principal_type: str = "ServicePrincipal") -> authorization.RoleAssignment:
    """`role` (a full role definition ID, `role_id`) for `principal` on `scope` and nothing wider. A managed
    identity is a `ServicePrincipal`; saying so lets Azure assign it before the identity has replicated."""
    return authorization.RoleAssignment(
        name, role_assignment_name=assignment_name(scope, principal, role), principal_id=principal,
        principal_type=principal_type, role_definition_id=role, scope=scope,
        opts=pulumi.ResourceOptions(parent=parent))
