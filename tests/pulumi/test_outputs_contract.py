"""The Azure stack exports exactly the contract in skyrack.outputs: declared names, their shapes, their secrecy."""

from __future__ import annotations

from pulumi_harness import StackRun

from skyrack import outputs as contract


def test_every_export_is_declared_with_its_secrecy(stack: StackRun) -> None:
    assert contract.undeclared(stack.outputs) == []
    for name, value in stack.outputs.items():
        if value is not None:
            assert (name in stack.secret_outputs) == contract.is_secret(name), name
    assert {o.name for o in contract.CONTRACT.values() if o.always} <= set(stack.outputs)


def test_every_export_has_its_declared_shape(stack: StackRun) -> None:
    """What `pulumi stack output --json --show-secrets` would write passes the join's and the cluster's checks."""
    contract.validate(stack.outputs, "stack outputs", (*contract.JOIN_REQUIRED, *contract.CLUSTER_LAYER_REQUIRED))


def test_cloud_pools_are_exported_by_their_scale_set_names(dev: StackRun) -> None:
    names = {r.plain["vmScaleSetName"] for r in dev.of_type("compute:VirtualMachineScaleSet")}
    assert set(dev.outputs["cloud_pool_scale_sets"].values()) == names and names
