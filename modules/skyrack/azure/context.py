"""What every component needs: the plan, the resource group, names and tags."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from ..plan import Plan


def env_tags(env_name: str) -> dict[str, str]:
    """Tags on every resource of an environment: find them with `az resource list --tag skyrack-env=<env>`."""
    return {"skyrack-env": env_name, "managed-by": "skyrack"}


@dataclass(frozen=True)
class Context:
    plan: Plan
    resource_group: pulumi.Input[str]
    subscription_id: pulumi.Input[str]
    tenant_id: pulumi.Input[str]

    @property
    def location(self) -> str:
        return self.plan.env.azure.location

    @property
    def prefix(self) -> str:
        """Name prefix of the environment's Azure resources."""
        return f"skyrack-{self.plan.env.name}"

    @property
    def tags(self) -> dict[str, str]:
        return env_tags(self.plan.env.name)

    @property
    def group_id(self) -> pulumi.Output[str]:
        """The resource group's full ID (a scope for role assignments and role definitions)."""
        return pulumi.Output.concat("/subscriptions/", self.subscription_id, "/resourceGroups/", self.resource_group)

    def common(self) -> dict[str, object]:
        """Arguments every resource of the environment takes."""
        return {"resource_group_name": self.resource_group, "location": self.location, "tags": self.tags}
