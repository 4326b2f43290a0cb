"""What every component needs: the plan, the resource group, names and tags."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from ..plan import Plan


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
        return {"skyrack-env": self.plan.env.name, "managed-by": "skyrack"}

    def common(self) -> dict[str, object]:
        """Arguments every resource of the environment takes."""
        return {"resource_group_name": self.resource_group, "location": self.location, "tags": self.tags}
