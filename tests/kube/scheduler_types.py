"""The KubeSchedulerConfiguration API type (kubescheduler.config.k8s.io/v1), transcribed field by field
from its Go definitions (k8s.io/kube-scheduler/config/v1/types.go, k8s.io/component-base/config/v1alpha1/types.go)
as strict pydantic models.

kube-scheduler decodes its --config strictly (an unknown field is an error), so these models
forbid extra fields too. No Python package ships these types, hence the transcription; it is test
code, kept next to the test that uses it. The lab runs the real kube-scheduler on the same file.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator


class _Go(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class LeaderElectionConfiguration(_Go):
    leaderElect: bool | None = None
    leaseDuration: str | None = None
    renewDeadline: str | None = None
    retryPeriod: str | None = None
    resourceLock: str | None = None
    resourceName: str | None = None
    resourceNamespace: str | None = None


class ClientConnectionConfiguration(_Go):
    kubeconfig: str | None = None
    acceptContentTypes: str | None = None
    contentType: str | None = None
    qps: float | None = None
    burst: int | None = None


class Plugin(_Go):
    name: str
    weight: int | None = None


class PluginSet(_Go):
    enabled: list[Plugin] | None = None
    disabled: list[Plugin] | None = None


class Plugins(_Go):
    preEnqueue: PluginSet | None = None
    queueSort: PluginSet | None = None
    preFilter: PluginSet | None = None
    filter: PluginSet | None = None
    postFilter: PluginSet | None = None
    preScore: PluginSet | None = None
    score: PluginSet | None = None
    reserve: PluginSet | None = None
    permit: PluginSet | None = None
    preBind: PluginSet | None = None
    bind: PluginSet | None = None
    postBind: PluginSet | None = None
    multiPoint: PluginSet | None = None


class PluginConfig(_Go):
    name: str
    args: dict[str, Any] | None = None  # runtime.RawExtension: decoded by the plugin's own args type


class KubeSchedulerProfile(_Go):
    schedulerName: str | None = None
    percentageOfNodesToScore: int | None = None
    plugins: Plugins | None = None
    pluginConfig: list[PluginConfig] | None = None


class Extender(_Go):
    urlPrefix: str
    filterVerb: str | None = None
    preemptVerb: str | None = None
    prioritizeVerb: str | None = None
    weight: int | None = None
    bindVerb: str | None = None
    enableHTTPS: bool | None = None
    tlsConfig: dict[str, Any] | None = None
    httpTimeout: str | None = None
    nodeCacheCapable: bool | None = None
    managedResources: list[dict[str, Any]] | None = None
    ignorable: bool | None = None


class KubeSchedulerConfiguration(_Go):
    apiVersion: Literal["kubescheduler.config.k8s.io/v1"]
    kind: Literal["KubeSchedulerConfiguration"]
    parallelism: int | None = None
    leaderElection: LeaderElectionConfiguration | None = None
    clientConnection: ClientConnectionConfiguration | None = None
    enableProfiling: bool | None = None
    enableContentionProfiling: bool | None = None
    percentageOfNodesToScore: int | None = None
    podInitialBackoffSeconds: int | None = None
    podMaxBackoffSeconds: int | None = None
    profiles: list[KubeSchedulerProfile] | None = None
    extenders: list[Extender] | None = None
    delayCacheUntilActive: bool | None = None

    @field_validator("profiles")
    @classmethod
    def _same_queue_sort(cls, profiles: list[KubeSchedulerProfile] | None) -> list[KubeSchedulerProfile] | None:
        """kube-scheduler's validation: every profile must use the same queueSort plugin."""
        sorts = {repr(p.plugins.queueSort if p.plugins else None) for p in profiles or []}
        if len(sorts) > 1:
            raise ValueError("queueSort must be the same in every profile")
        return profiles
