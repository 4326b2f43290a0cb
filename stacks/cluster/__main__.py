"""The cluster-layer Pulumi program: the stack named <env> reads configs/<env>.yaml and the
outputs of the control-plane stack of the same name, and builds skyrack.kube.ClusterLayer."""

from __future__ import annotations

from pathlib import Path

import pulumi

from skyrack import plan as planmod
from skyrack.errors import InputError
from skyrack.kube.layer import ClusterLayer, ControlPlane

ROOT = Path(__file__).resolve().parents[2]


def autoscaler_credentials(ref: pulumi.StackReference) -> pulumi.Output:
    """ARM_* for cluster-autoscaler: the stack's `autoscaler_credentials` (a secret), plus its resource group."""
    return pulumi.Output.all(ref.get_output("resource_group"), ref.get_output("autoscaler_credentials")).apply(
        lambda v: {**({"ARM_RESOURCE_GROUP": v[0]} if v[0] else {}), **(v[1] or {})})


def main() -> None:
    stack = pulumi.get_stack()
    cfg = pulumi.Config()
    try:
        plan = planmod.make(ROOT / "configs" / f"{stack}.yaml")
    except InputError as exc:
        raise pulumi.RunError(str(exc)) from None
    ref = pulumi.StackReference(cfg.get("controlPlaneStack") or f"{pulumi.get_organization()}/skyrack/{stack}")
    cp = ControlPlane(
        apiserver_endpoint=ref.require_output("apiserver_endpoint"),
        ca_cert_pem=ref.require_output("ca_cert_pem"),
        bootstrap_token=ref.require_output("bootstrap_token"),
        admin_kubeconfig=ref.require_output("admin_kubeconfig"),
        scale_sets=ref.get_output("cloud_pool_scale_sets"),
        autoscaler_credentials=autoscaler_credentials(ref) if plan.pools else None,
        pool_bootstrap_token=ref.require_output("pool_bootstrap_token") if plan.pools else None,
    )
    layer = ClusterLayer("cluster", plan, cp, wait_timeout_s=60 * (cfg.get_int("apiserverWaitMinutes") or 20))
    pulumi.export("concerns", list(layer.concerns))
    pulumi.export("apiserver_endpoint", cp.apiserver_endpoint)


main()
