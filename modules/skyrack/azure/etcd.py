"""An etcd cluster (the main one, or the separate events cluster): one VM per member.

Members are spread over `azure.zones` by the plan (round robin: no two members share a
zone while there are zones left). Each member's data lives on the VM's local NVMe
disk (the plan picks Lsv3 sizes), set up by its cloud-init at every boot; a member whose
disk came back empty rejoins by itself, and a timer uploads the leader's snapshots.
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import compute

from ..render import cloud_init
from .context import Context
from .pki import ControlPlanePki
from .vm import control_plane_vm


class EtcdCluster(pulumi.ComponentResource):
    vms: dict[str, compute.VirtualMachine]

    def __init__(self, name: str, ctx: Context, role: str, subnet_id: pulumi.Input[str], pki: ControlPlanePki,
                 ssh_public_key: pulumi.Input[str], backup_url: pulumi.Input[str], kubernetes_repo: str,
                 boot_after: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None):
        """`backup_url`: the snapshot container; each member's timer uploads there (the leader's snapshot).
        `kubernetes_repo`: the site's Kubernetes apt repository, which serves etcd too."""
        super().__init__("skyrack:azure:EtcdCluster", name, None, opts)
        plan = ctx.plan
        self.vms = {}
        for member in plan.members_of(role):
            user_data = pulumi.Output.all(pki.etcd(member), backup_url).apply(
                lambda v, m=member: cloud_init.etcd(plan, m, v[0], kubernetes_repo=kubernetes_repo,
                                                    backup_url=v[1]))
            self.vms[member.name] = control_plane_vm(ctx, member, subnet_id, user_data, ssh_public_key, self,
                                                     boot_after=boot_after)
        self.endpoints = cloud_init.etcd_endpoints(plan, role)
        self.register_outputs({"endpoints": self.endpoints})
