"""The cluster layer as Pulumi components: one ComponentResource per concern, composed by ClusterLayer.

Inputs come from the control-plane stack (see ``ControlPlane``); everything else from the plan.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .. import plan as planmod
from . import bootstrap, concerns, readiness
from . import objects as o

READY_INTERVAL_S = 10.0  # between /readyz polls while `pulumi up` waits for the API servers


@dataclass
class ControlPlane:
    """What the Azure control-plane stack exports and this layer consumes."""

    apiserver_endpoint: pulumi.Input[str]
    ca_cert_pem: pulumi.Input[str]
    bootstrap_token: pulumi.Input[str]  # a Pulumi secret
    admin_kubeconfig: pulumi.Input[str]  # a Pulumi secret
    scale_sets: pulumi.Input[Mapping[str, str]] | None = None  # cloud pool -> scale set name
    autoscaler_credentials: pulumi.Input[Mapping[str, str]] | None = None  # ARM_* (a secret)
    pool_bootstrap_token: pulumi.Input[str] | None = None  # a Pulumi secret: the cloud pools' own, no expiry


class Concern(pulumi.ComponentResource):
    """A set of manifests created as typed pulumi-kubernetes resources under one component.

    Namespaces are created first and every object in one depends on it.
    """

    def __init__(self, kind: str, name: str, manifests: list[o.Manifest], opts: pulumi.ResourceOptions):
        super().__init__(f"skyrack:kube:{kind}", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        namespaces = {m["metadata"]["name"]: o.create(m, child) for m in manifests if m["kind"] == "Namespace"}
        self.resources: dict[str, Any] = dict(namespaces)
        for m in manifests:
            if m["kind"] == "Namespace":
                continue
            ns = namespaces.get(m["metadata"].get("namespace", ""))
            opts_m = pulumi.ResourceOptions(parent=self, depends_on=[ns] if ns else None)
            self.resources[o.resource_name(m)] = o.create(m, opts_m)
        self.register_outputs({"objects": sorted(o.resource_name(m) for m in manifests)})


class ClusterLayer(pulumi.ComponentResource):
    def __init__(self, name: str, plan: planmod.Plan, cp: ControlPlane, *, now: dt.datetime | None = None,
                 wait_timeout_s: float | None = 1200, opts: pulumi.ResourceOptions | None = None):
        """wait_timeout_s None: do not wait for the API servers (tests, or a cluster known to be up)."""
        super().__init__("skyrack:kube:ClusterLayer", name, None, opts)
        kubeconfig = pulumi.Output.secret(cp.admin_kubeconfig)
        if wait_timeout_s is not None and not pulumi.runtime.is_dry_run():
            # polled in a worker thread, so the program's event loop is not blocked meanwhile
            kubeconfig = pulumi.Output.all(cp.apiserver_endpoint, cp.ca_cert_pem, kubeconfig).apply(
                lambda a: asyncio.to_thread(_when_ready, a[0], a[1], a[2], wait_timeout_s))
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=kubeconfig, enable_config_map_mutable=True,
                                     opts=pulumi.ResourceOptions(parent=self))
        token_id, token_secret = _token_parts(cp.bootstrap_token)
        pool_id, pool_secret = _token_parts(cp.pool_bootstrap_token) if cp.pool_bootstrap_token else (None, None)
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        groups = concerns.all_manifests(
            plan, endpoint=cp.apiserver_endpoint, ca_cert_pem=cp.ca_cert_pem, token_id=token_id,
            token_secret_part=token_secret, now=now or dt.datetime.now(dt.UTC), scale_sets=cp.scale_sets,
            autoscaler_credentials=cp.autoscaler_credentials, pool_token_id=pool_id, pool_token_secret_part=pool_secret)
        self.concerns = {kind: Concern(kind, f"{name}-{kind.lower()}", ms, child) for kind, ms in groups.items()}
        self.register_outputs({"concerns": list(self.concerns)})


def _token_parts(token: pulumi.Input[str]) -> tuple[pulumi.Output[str], pulumi.Output[str]]:
    """A bootstrap token's public id (names its Secret) and its secret half (stays a Pulumi secret)."""
    parts = pulumi.Output.secret(token).apply(bootstrap.split_token)
    return pulumi.Output.unsecret(parts.apply(lambda t: t[0])), parts.apply(lambda t: t[1])


def _when_ready(endpoint: str, ca_pem: str, kubeconfig: str, timeout_s: float) -> str:
    try:
        readiness.wait_for_apiserver(endpoint, ca_pem, kubeconfig, timeout_s=timeout_s, interval_s=READY_INTERVAL_S,
                                     log=lambda msg: pulumi.log.info(msg))
    except readiness.NotReady as exc:
        raise pulumi.RunError(str(exc)) from None  # one line, no traceback: nothing was created
    return kubeconfig
