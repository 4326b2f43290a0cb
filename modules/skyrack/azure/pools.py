"""Cloud pools: one VM scale set per `cloud_pools` entry, pod addresses on the NICs.

Each instance's NIC has a primary IP configuration for the node and `pods_per_node`
secondary IP configurations for its pods ("alias IPs"), all from the pool's subnet,
which is exactly the pool's pod range from the plan. The scale set starts at `min`;
the cluster autoscaler (auto-discovery by the `cluster-autoscaler-*` tags, bounds in
the `min`/`max` tags) owns the capacity afterwards, so Pulumi ignores it. Each new
instance joins the cluster as a worker (kubeadm, the bootstrap token) from cloud-init;
a change to that user-data reaches new instances only (upgrade policy Manual).
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import compute

from ..plan import PoolPlan
from ..render import cloud_init
from .context import Context
from .vm import ADMIN_USER, DEBIAN_12, custom_data, linux_configuration


def ip_configurations(pool: PoolPlan, subnet_id: pulumi.Input[str]) -> list[dict[str, object]]:
    node = {"name": "node", "primary": True, "subnet": {"id": subnet_id}}
    pods = [{"name": f"pod-{i:03d}", "primary": False, "subnet": {"id": subnet_id}} for i in range(pool.max_pods)]
    return [node, *pods]


class CloudPool(pulumi.ComponentResource):
    def __init__(self, name: str, ctx: Context, pool: PoolPlan, subnet_id: pulumi.Input[str],
                 ssh_public_key: pulumi.Input[str], join: pulumi.Output[cloud_init.WorkerJoin], kubernetes_repo: str,
                 boot_after: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None):
        super().__init__("skyrack:azure:CloudPool", name, None, opts)
        plan, env = ctx.plan, ctx.plan.env
        user_data = join.apply(lambda j: custom_data(
            cloud_init.pool_node(plan, pool, j, kubernetes_repo=kubernetes_repo)))
        zones = list(env.azure.zones)
        tags = {**ctx.tags, "skyrack-pool": pool.name, "skyrack-pod-cidr": pool.pod_cidr,
                "cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": env.name,
                "min": str(pool.min), "max": str(pool.max)}
        self.scale_set = compute.VirtualMachineScaleSet(
            f"pool-{pool.name}", vm_scale_set_name=f"{ctx.prefix}-{pool.name}",
            sku={"name": pool.vm_size, "tier": "Standard", "capacity": pool.min},
            zones=zones or None, zone_balance=len(zones) > 1, orchestration_mode="Uniform",
            overprovision=False, single_placement_group=False, platform_fault_domain_count=1,
            upgrade_policy={"mode": "Manual"},
            virtual_machine_profile={
                "os_profile": {"computer_name_prefix": f"{pool.name}-", "admin_username": ADMIN_USER,
                               "custom_data": user_data, "linux_configuration": linux_configuration(ssh_public_key)},
                "storage_profile": {"image_reference": DEBIAN_12,
                                    "os_disk": {"create_option": "FromImage", "caching": "ReadWrite",
                                                "managed_disk": {"storage_account_type": "Premium_LRS"}}},
                "network_profile": {"network_interface_configurations": [{
                    "name": "nic", "primary": True, "enable_accelerated_networking": True,
                    "ip_configurations": ip_configurations(pool, subnet_id)}]},
                "diagnostics_profile": {"boot_diagnostics": {"enabled": True}},
            },
            resource_group_name=ctx.resource_group, location=ctx.location, tags=tags,
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["sku.capacity"], depends_on=boot_after or []))
        self.register_outputs({"name": self.scale_set.name})
