"""cluster-autoscaler's Azure identity: a managed identity on the API servers, allowed to scale the pools only.

Under mocks: the identity exists when there are cloud pools (and not otherwise), the VMs where the
autoscaler runs carry it, each role assignment's scope and role, and the `autoscaler_credentials`
output (secret, the managed-identity ARM_* settings, no client secret).
"""

from __future__ import annotations

import pytest
from pulumi_harness import SUBSCRIPTION, Registered, StackRun, run_stack

from skyrack import plan as planmod
from skyrack.azure import rbac
from skyrack.azure.autoscaler import SCALE_SET_READER_ACTIONS
from support import CONFIGS

MANAGED_IDENTITY_KEYS = {"ARM_USE_MANAGED_IDENTITY_EXTENSION", "ARM_USER_ASSIGNED_IDENTITY_ID", "ARM_SUBSCRIPTION_ID",
                         "ARM_RESOURCE_GROUP"}


def identity_of(run: StackRun) -> Registered:
    (identity,) = run.of_type("managedidentity:UserAssignedIdentity")
    return identity


def autoscaler_grants(run: StackRun) -> list[dict]:
    principal = identity_of(run).state["principalId"]
    return [r.plain for r in run.of_type("authorization:RoleAssignment") if r.plain["principalId"] == principal]


def vm_role(role: str) -> str:
    return f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Authorization/roleDefinitions/{role}"


def test_one_identity_for_the_autoscaler(stack: StackRun) -> None:
    identity = identity_of(stack)
    assert identity.plain["resourceName"] == f"skyrack-{stack.name}-autoscaler"
    assert identity.plain["tags"]["skyrack-env"] == stack.name


def test_it_scales_each_pool_on_the_scale_set_and_its_subnet_only(stack: StackRun) -> None:
    grants = autoscaler_grants(stack)
    scale_sets = {s.plain["vmScaleSetName"]: s.state["id"] for s in stack.of_type("compute:VirtualMachineScaleSet")}
    vnet_id = stack.one("network:VirtualNetwork", "vnet").state["id"]
    pools = planmod.make(CONFIGS / f"{stack.name}.yaml").pools
    assert len(scale_sets) == len(pools) > 0
    contributor = [g for g in grants if g["roleDefinitionId"] == vm_role(rbac.VM_CONTRIBUTOR)]
    expected = {scale_sets[f"skyrack-{stack.name}-{p.name}"] for p in pools}
    expected |= {f"{vnet_id}/subnets/pool-{p.name}" for p in pools}  # the join a scale-set write is checked for
    assert sorted(g["scope"] for g in contributor) == sorted(expected)
    assert all(g["principalType"] == "ServicePrincipal" for g in grants)


def test_the_only_wider_scope_is_a_role_that_lists_scale_sets(stack: StackRun) -> None:
    """Listing the resource group's scale sets is authorised on the group: a custom role that can do nothing else."""
    group = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/skyrack-{stack.name}"
    (definition,) = stack.of_type("authorization:RoleDefinition")
    role = definition.plain
    assert role["permissions"] == [{"actions": list(SCALE_SET_READER_ACTIONS)}]
    assert SCALE_SET_READER_ACTIONS == ("Microsoft.Compute/virtualMachineScaleSets/read",)
    assert role["scope"] == group and role["assignableScopes"] == [group]  # usable in this group only
    wider = [g for g in autoscaler_grants(stack) if g["roleDefinitionId"] != vm_role(rbac.VM_CONTRIBUTOR)]
    assert [(g["scope"], g["roleDefinitionId"]) for g in wider] == [(group, vm_role(role["roleDefinitionId"]))]
    # nothing on the subscription, nothing but the pools' own resources with a write role
    assert all(g["scope"].startswith(group + "/") or g["scope"] == group for g in autoscaler_grants(stack))


def test_the_api_servers_carry_it_and_nothing_else_does(stack: StackRun) -> None:
    """The autoscaler runs on the API servers (host network, so their metadata service answers it): the cluster
    layer pins it there (tests/kube/test_autoscaler.py)."""
    identity = identity_of(stack).state["id"]
    for vm in stack.of_type("compute:VirtualMachine"):
        got = vm.plain["identity"]
        if vm.name.startswith("apiserver-"):
            assert got == {"type": "SystemAssigned, UserAssigned", "userAssignedIdentities": [identity]}, vm.name
        else:  # etcd members keep their own identity only (the backup writer)
            assert got == {"type": "SystemAssigned"}, vm.name
    for scale_set in stack.of_type("compute:VirtualMachineScaleSet"):  # jobs run on pool nodes: no identity there
        assert "identity" not in scale_set.plain


def test_credentials_are_a_secret_output_with_no_client_secret(stack: StackRun) -> None:
    creds = stack.outputs["autoscaler_credentials"]
    assert "autoscaler_credentials" in stack.secret_outputs
    assert set(creds) == MANAGED_IDENTITY_KEYS  # no ARM_CLIENT_SECRET, no ARM_CLIENT_CERT_*: nothing to leak
    assert creds["ARM_USE_MANAGED_IDENTITY_EXTENSION"] == "true"
    assert creds["ARM_USER_ASSIGNED_IDENTITY_ID"] == identity_of(stack).state["clientId"]
    assert creds["ARM_SUBSCRIPTION_ID"] == SUBSCRIPTION
    assert creds["ARM_RESOURCE_GROUP"] == stack.outputs["resource_group"]


@pytest.fixture(scope="module")
def without_pools(tmp_path_factory: pytest.TempPathFactory) -> StackRun:
    configs = tmp_path_factory.mktemp("configs")
    env = (CONFIGS / "dev.yaml").read_text()
    pools = "cloud_pools:\n  - {name: cpu, vm_size: Standard_D16s_v5, min: 0, max: 100}\n"
    assert pools in env
    (configs / "dev.yaml").write_text(env.replace(pools, "cloud_pools: []\n"))
    lock = (CONFIGS / "dev.lock.yaml").read_text()
    assert "pools:\n  cpu: " in lock
    (configs / "dev.lock.yaml").write_text("\n".join(
        "pools: {}" if line == "pools:" else line for line in lock.splitlines() if not line.startswith("  cpu: ")) + "\n")
    return run_stack("dev", configs)


def test_without_cloud_pools_there_is_no_identity_and_no_credentials(without_pools: StackRun) -> None:
    run = without_pools
    assert not run.of_type("compute:VirtualMachineScaleSet")
    assert not run.of_type("managedidentity:UserAssignedIdentity") and not run.of_type("authorization:RoleDefinition")
    assert {r.name for r in run.of_type("authorization:RoleAssignment")} == {"backup-writer-etcd-0", "backup-writer-etcd-1",
                                                                           "backup-writer-etcd-2"}
    assert "autoscaler_credentials" not in run.outputs and "cloud_pool_scale_sets" not in run.outputs
    assert all(vm.plain["identity"] == {"type": "SystemAssigned"} for vm in run.of_type("compute:VirtualMachine"))
