"""The outputs contract on the Pulumi side: how a control-plane stack exports it and how a stack reads it.

`skyrack.outputs` declares every output (plain data, no Pulumi). Here the two Pulumi edges
of it: `export` (the Azure stack and the lab's stand-in stack: a secret output is a Pulumi
secret because the contract says so, an undeclared name is refused) and `read` (the cluster
layer, through a StackReference: required outputs must be there, secret ones stay secret
whatever the other stack did).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pulumi

from . import outputs as contract


def export(outputs: dict[str, Any], required: Iterable[str] | None = None) -> dict[str, Any]:
    """Export `outputs` as the contract declares them. `required`: what this stack must export
    (default: every output the contract marks `always`)."""
    unknown = contract.undeclared(outputs)
    if unknown:
        raise pulumi.RunError(f"outputs not declared in skyrack.outputs.CONTRACT: {', '.join(unknown)}")
    want = [o.name for o in contract.CONTRACT.values() if o.always] if required is None else list(required)
    missing = [name for name in want if name not in outputs]
    if missing:
        raise pulumi.RunError(f"outputs the contract requires of this stack are not exported: {', '.join(missing)}")
    exported = {k: pulumi.Output.secret(v) if contract.is_secret(k) else v for k, v in outputs.items()}
    for key, value in exported.items():
        pulumi.export(key, value)
    return exported


def read(ref: pulumi.StackReference, name: str, required: Iterable[str] = contract.CLUSTER_LAYER_REQUIRED
         ) -> pulumi.Output:
    """One output of another stack, by its name in the contract."""
    spec = contract.spec(name)
    value = ref.require_output(name) if name in required else ref.get_output(name)
    return pulumi.Output.secret(value) if spec.secret else value
