"""Node labels and taints as the rack join sets them, turned into selectors and tolerations.

The strings come from ``skyrack.plan.node_labels``/``node_taints`` (what every on-prem node
carries); nothing here re-types a label key, so a rename there moves both sides together.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from .. import config, plan

_TEAM, _RACK, _MODEL = "probe-team", "probe-rack", "probe-model"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    @classmethod
    def parse(cls, text: str) -> Taint:
        """'key=value:Effect' (kubectl and kubeadm's format)."""
        kv, _, effect = text.rpartition(":")
        key, _, value = kv.partition("=")
        if not key or not effect:
            raise ValueError(f"{text!r} is not a taint of the form key=value:Effect")
        return cls(key, value, effect)

    def toleration(self) -> dict[str, str]:
        """Tolerates exactly this taint."""
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}

    def toleration_any_value(self) -> dict[str, str]:
        """Tolerates this taint whatever its value (e.g. every team's)."""
        return {"key": self.key, "operator": "Exists", "effect": self.effect}


def _probe(team: bool, gpu: bool) -> config.Rack:
    return config.Rack.model_construct(
        name=_RACK, team=_TEAM if team else None, nodes=[], node_range=None,
        gpu=config.Gpu.model_construct(model=_MODEL, count=1, vendor="nvidia") if gpu else None)


def _key_with_value(labels: dict[str, str], value: str) -> str:
    return next(k for k, v in labels.items() if v == value)


@dataclass(frozen=True)
class Keys:
    team_label: str
    rack_label: str
    gpu_product_label: str
    gpu_count_label: str
    team_taint: Taint  # with the probe team as value; use .key
    gpu_taint: Taint


@cache
def keys() -> Keys:
    env = config.Environment.model_construct(name="probe")
    gpu_labels = plan.node_labels(env, _probe(team=False, gpu=True))
    plain_labels = plan.node_labels(env, _probe(team=False, gpu=False))
    gpu_only = {k: v for k, v in gpu_labels.items() if k not in plain_labels}
    (count_key,) = (k for k, v in gpu_only.items() if v != _MODEL)
    (team_taint,) = (Taint.parse(t) for t in plan.node_taints(_probe(team=True, gpu=False)))
    (gpu_taint,) = (Taint.parse(t) for t in plan.node_taints(_probe(team=False, gpu=True)))
    return Keys(
        team_label=_key_with_value(plan.node_labels(env, _probe(team=True, gpu=False)), _TEAM),
        rack_label=_key_with_value(plain_labels, _RACK),
        gpu_product_label=_key_with_value(gpu_only, _MODEL),
        gpu_count_label=count_key,
        team_taint=team_taint,
        gpu_taint=gpu_taint,
    )


def team_tolerations(rack_of_team: config.Rack) -> list[dict[str, str]]:
    """Tolerations for exactly the taints a team's rack carries (team, and GPU if it has GPUs)."""
    return [Taint.parse(t).toleration() for t in plan.node_taints(rack_of_team)]


def system_tolerations() -> list[dict[str, str]]:
    """For cluster services (DNS, monitoring, autoscaler): every team's racks and GPU nodes.

    On-prem racks are all tainted; the only untainted capacity is a cloud pool, which may be
    scaled to zero. Cluster services must be able to run somewhere from the first node on.
    """
    k = keys()
    return [k.team_taint.toleration_any_value(), k.gpu_taint.toleration_any_value()]


def prefer_non_gpu() -> dict[str, object]:
    """Node affinity that prefers nodes without GPUs, so cluster services leave GPU nodes to jobs."""
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "preference": {"matchExpressions": [{"key": keys().gpu_product_label, "operator": "DoesNotExist"}]},
    }]}}


def gpu_node_affinity() -> dict[str, object]:
    """Required node affinity: only nodes that carry a GPU product label."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
        "matchExpressions": [{"key": keys().gpu_product_label, "operator": "Exists"}]}]}}}


def team_gpu_tolerations(team: str) -> list[dict[str, str]]:
    """Tolerations for a team's racks, GPU or not: its own team taint and the GPU taint."""
    return team_tolerations(_probe_for(team))


def _probe_for(team: str) -> config.Rack:
    return config.Rack.model_construct(
        name=_RACK, team=team, nodes=[], node_range=None,
        gpu=config.Gpu.model_construct(model=_MODEL, count=1, vendor="nvidia"))
