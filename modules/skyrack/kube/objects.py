"""Building Kubernetes manifests as plain dicts, and the one edge that turns them into Pulumi resources.

Manifests are dicts in the exact shape Kubernetes accepts (camelCase keys), so tests can validate
them against the API schema. A leaf may be a ``pulumi.Output`` (a token, the CA); everything else
is plain data from the plan.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

Manifest = dict[str, Any]
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}
PATCH_FORCE = {"pulumi.com/patchForce": "true"}  # server-side apply takes over fields another manager set
MANAGED_BY = {"app.kubernetes.io/managed-by": "skyrack"}


def obj(api_version: str, kind: str, name: Any, namespace: str | None = None, *,
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        **fields: Any) -> Manifest:
    """One Kubernetes object; ``fields`` are its top-level fields (``spec``, ``data``, ``rules`` ...)."""
    meta: dict[str, Any] = {"name": name, "labels": {**MANAGED_BY, **(labels or {})}}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **fields}


def service_account(name: str, namespace: str) -> Manifest:
    return obj("v1", "ServiceAccount", name, namespace)


def cluster_role(name: str, rules: list[dict[str, Any]]) -> Manifest:
    return obj("rbac.authorization.k8s.io/v1", "ClusterRole", name, rules=rules)


def role(name: str, namespace: str, rules: list[dict[str, Any]]) -> Manifest:
    return obj("rbac.authorization.k8s.io/v1", "Role", name, namespace, rules=rules)


def rule(groups: Iterable[str], resources: Iterable[str], verbs: Iterable[str],
         names: Iterable[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}
    if names:
        out["resourceNames"] = list(names)
    return out


def subject(kind: str, name: str, namespace: str | None = None) -> dict[str, str]:
    """kind: User | Group | ServiceAccount."""
    out = {"kind": kind, "name": name}
    if kind == "ServiceAccount":
        out["namespace"] = namespace or "default"
    else:
        out["apiGroup"] = "rbac.authorization.k8s.io"
    return out


def binding(name: str, role_kind: str, role_name: str, subjects: list[dict[str, str]],
            namespace: str | None = None) -> Manifest:
    """A ClusterRoleBinding (namespace None) or a RoleBinding."""
    kind = "ClusterRoleBinding" if namespace is None else "RoleBinding"
    return obj("rbac.authorization.k8s.io/v1", kind, name, namespace, subjects=subjects,
               roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name})


def workload(kind: str, name: str, namespace: str, pod: dict[str, Any], *, labels: dict[str, str],
             replicas: int | None = None, annotations: dict[str, str] | None = None,
             pod_annotations: dict[str, str] | None = None) -> Manifest:
    """A Deployment or DaemonSet whose selector is ``labels``.

    Pulumi does not wait for it to become ready (``skipAwait``): its pods need nodes, and nodes
    join after this layer exists (see docs/kube.md).
    """
    template_meta: dict[str, Any] = {"labels": labels}
    if pod_annotations:
        template_meta["annotations"] = pod_annotations
    spec: dict[str, Any] = {"selector": {"matchLabels": labels}, "template": {"metadata": template_meta, "spec": pod}}
    if replicas is not None:
        spec["replicas"] = replicas
    return obj("apps/v1", kind, name, namespace, labels=labels,
               annotations={**SKIP_AWAIT, **(annotations or {})}, spec=spec)


def scrape(port: int, path: str = "/metrics") -> dict[str, str]:
    """Annotations the Prometheus `kubernetes-pods` job looks for."""
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": path}


def container(name: str, image: str, *, args: list[str] | None = None, command: list[str] | None = None,
              requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
              **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": image, "imagePullPolicy": "IfNotPresent"}
    if command:
        out["command"] = command
    if args:
        out["args"] = args
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    if resources:
        out["resources"] = resources
    out.update(fields)
    return out


def resource_name(m: Manifest) -> str:
    """The Pulumi logical name of a manifest: unique per stack, stable, readable."""
    meta = m["metadata"]
    ns = meta.get("namespace")
    name = meta["name"] if isinstance(meta["name"], str) else m.get("_pulumi_name", "unnamed")
    return "-".join(p for p in (m["kind"].lower(), ns, name) if p)


_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _snake(key: str) -> str:
    return _CAMEL.sub("_", key).lower()


def resource_class(api_version: str, kind: str) -> type:
    """The typed pulumi-kubernetes class for an apiVersion/kind, e.g. apps/v1 Deployment."""
    import pulumi_kubernetes as k8s

    group, _, version = api_version.rpartition("/")
    module = group.split(".")[0] if group else "core"
    try:
        return getattr(getattr(getattr(k8s, module), version), kind)
    except AttributeError:
        raise ValueError(f"pulumi-kubernetes has no resource class for {api_version} {kind}") from None


# A manifest's private key (never sent): the fields the API server will not change in place. Pulumi then
# replaces the object, deleting the old one first (a Kubernetes name cannot exist twice).
REPLACE_ON_CHANGES = "_replace_on_changes"


def create(m: Manifest, opts: Any) -> Any:
    """Create the typed pulumi-kubernetes resource for a manifest (the Pulumi edge)."""
    cls = resource_class(m["apiVersion"], m["kind"])
    kwargs = {_snake(k): v for k, v in m.items() if k not in ("apiVersion", "kind") and not k.startswith("_")}
    if m.get(REPLACE_ON_CHANGES):
        import pulumi

        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
            replace_on_changes=list(m[REPLACE_ON_CHANGES]), delete_before_replace=True))
    return cls(resource_name(m), opts=opts, **kwargs)


def lift(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) now for plain values; for a pulumi.Output among them, the Output of it."""
    outputs = [a for a in args if hasattr(a, "apply")]
    if not outputs:
        return fn(*args)
    import pulumi

    return pulumi.Output.all(*args).apply(lambda vals: fn(*vals))
