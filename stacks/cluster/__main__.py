"""The cluster-layer Pulumi program: the stack named <env> reads configs/<env>.yaml and the
outputs of the control-plane stack of the same name, and builds skyrack.kube.ClusterLayer."""

from __future__ import annotations

from pathlib import Path

import pulumi

from skyrack import plan as planmod
from skyrack.errors import InputError
from skyrack.kube import readiness
from skyrack.kube.layer import ClusterLayer, ControlPlane
from skyrack.stackio import read

ROOT = Path(__file__).resolve().parents[2]


def autoscaler_credentials(ref: pulumi.StackReference) -> pulumi.Output:
    """ARM_* for cluster-autoscaler: the stack's `autoscaler_credentials` (a secret), plus its resource group."""
    return pulumi.Output.all(read(ref, "resource_group"), read(ref, "autoscaler_credentials")).apply(
        lambda v: {**({"ARM_RESOURCE_GROUP": v[0]} if v[0] else {}), **(v[1] or {})})


def main() -> None:
    stack = pulumi.get_stack()
    cfg = pulumi.Config()
    try:
        plan = planmod.make(Path(cfg.get("environment") or ROOT / "configs" / f"{stack}.yaml"))
    except InputError as exc:
        raise pulumi.RunError(str(exc)) from None
    ref = pulumi.StackReference(cfg.get("controlPlaneStack") or f"{pulumi.get_organization()}/skyrack/{stack}")
    cp = ControlPlane(
        apiserver_endpoint=read(ref, "apiserver_endpoint"),
        ca_cert_pem=read(ref, "ca_cert_pem"),
        bootstrap_token=read(ref, "bootstrap_token"),
        admin_kubeconfig=read(ref, "admin_kubeconfig"),
        scale_sets=read(ref, "cloud_pool_scale_sets"),
        autoscaler_credentials=autoscaler_credentials(ref) if plan.pools else None,
        pool_bootstrap_token=read(ref, "pool_bootstrap_token") if plan.pools else None,
    )
    try:
        wait_s = readiness.wait_seconds(cfg.get("apiserverWaitMinutes"))
    except ValueError as exc:
        raise pulumi.RunError(str(exc)) from None
    layer = ClusterLayer("cluster", plan, cp, wait_timeout_s=wait_s)
    pulumi.export("concerns", list(layer.concerns))
    pulumi.export("apiserver_endpoint", cp.apiserver_endpoint)


main()
