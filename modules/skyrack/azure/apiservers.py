"""The API servers and their internal Standard load balancer.

The load balancer's frontend is the plan's `apiserver_lb_ip` (zone-redundant), its
health probe asks each API server's `/readyz` over HTTPS on 6443 (readable without
credentials), so a server that is up but not ready gets no traffic. API servers are
spread over the zones by the plan and configured by kubeadm from cloud-init.
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import compute, network

from ..render import cloud_init
from ..tuning import LB_PROBE_INTERVAL_S, LB_PROBE_THRESHOLD
from .context import Context
from .pki import ControlPlanePki
from .vm import control_plane_vm

PORT = 6443
FRONTEND, BACKEND, PROBE = "apiserver", "apiservers", "readyz"


class ApiServers(pulumi.ComponentResource):
    vms: dict[str, compute.VirtualMachine]

    def __init__(self, name: str, ctx: Context, subnet_id: pulumi.Input[str], pki: ControlPlanePki,
                 ssh_public_key: pulumi.Input[str], kubernetes_repo: str,
                 boot_after: list[pulumi.Resource] | None = None, identities: list[pulumi.Input[str]] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        """`identities`: user-assigned managed identities for every API server (the autoscaler's, which runs there)."""
        super().__init__("skyrack:azure:ApiServers", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        plan = ctx.plan
        lb_name = f"{ctx.prefix}-apiserver"
        # Parts of a load balancer refer to each other by ID before the balancer exists.
        lb_id = pulumi.Output.concat("/subscriptions/", ctx.subscription_id, "/resourceGroups/", ctx.resource_group,
                                     "/providers/Microsoft.Network/loadBalancers/", lb_name)
        part = lambda kind, part_name: pulumi.Output.concat(lb_id, f"/{kind}/{part_name}")  # noqa: E731
        self.load_balancer = network.LoadBalancer(
            "apiserver-lb", load_balancer_name=lb_name, sku={"name": "Standard", "tier": "Regional"},
            frontend_ip_configurations=[{
                "name": FRONTEND, "private_ip_address": plan.apiserver_lb_ip, "private_ip_allocation_method": "Static",
                "private_ip_address_version": "IPv4", "subnet": {"id": subnet_id},
                "zones": list(plan.env.azure.zones) or None,
            }],
            backend_address_pools=[{"name": BACKEND}],
            probes=[{"name": PROBE, "protocol": "Https", "port": PORT, "request_path": "/readyz",
                     "interval_in_seconds": LB_PROBE_INTERVAL_S, "number_of_probes": LB_PROBE_THRESHOLD,
                     # the API servers' shutdown-delay-duration follows from these (skyrack.tuning)
                     "probe_threshold": LB_PROBE_THRESHOLD}],
            load_balancing_rules=[{
                "name": "apiserver", "protocol": "Tcp", "frontend_port": PORT, "backend_port": PORT,
                "frontend_ip_configuration": {"id": part("frontendIPConfigurations", FRONTEND)},
                "backend_address_pool": {"id": part("backendAddressPools", BACKEND)},
                "probe": {"id": part("probes", PROBE)},
                "idle_timeout_in_minutes": 30, "enable_tcp_reset": True, "load_distribution": "Default",
                "disable_outbound_snat": True,
            }],
            **ctx.common(), opts=child)
        backend = part("backendAddressPools", BACKEND)
        self.vms = {}
        for member in plan.members_of("apiserver"):
            user_data = pki.apiserver(member).apply(
                lambda p, m=member: cloud_init.apiserver(plan, m, p, kubernetes_repo=kubernetes_repo))
            self.vms[member.name] = control_plane_vm(ctx, member, subnet_id, user_data, ssh_public_key, self,
                                                     backend_pool_id=backend, depends_on=[self.load_balancer],
                                                     boot_after=boot_after, identities=identities)
        self.endpoint = plan.apiserver_endpoint
        self.register_outputs({"endpoint": self.endpoint})
