"""Node labels and taints as the rack join sets them, turned into selectors and tolerations.

The keys are the plan's constants (``skyrack.plan.TEAM_LABEL``, ``GPU_TAINT_KEY``, ...), the
ones ``plan.node_labels``/``node_taints`` put on every on-prem node; nothing here re-types a
key, so a rename there moves both sides together.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import plan


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


# kubeadm's own: its mark-control-plane phase labels every API server's Node with this key (empty value),
# and the API servers' kubeadm configuration (templates/cloud-init/kubeadm.yaml.j2) taints them with it.
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
CONTROL_PLANE_TAINT = Taint(CONTROL_PLANE_LABEL, "", "NoSchedule")
TEAM_TAINT = Taint(plan.TEAM_TAINT_KEY, "", plan.TAINT_EFFECT)  # the value is the team: tolerate any, or team_taint
GPU_TAINT = Taint(plan.GPU_TAINT_KEY, plan.GPU_TAINT_VALUE, plan.TAINT_EFFECT)


def team_taint(team: str) -> Taint:
    return Taint(TEAM_TAINT.key, team, TEAM_TAINT.effect)


def system_tolerations() -> list[dict[str, str]]:
    """For cluster services (DNS, monitoring, autoscaler): every team's racks and GPU nodes.

    On-prem racks are all tainted; the only untainted capacity is a cloud pool, which may be
    scaled to zero. Cluster services must be able to run somewhere from the first node on.
    """
    return [TEAM_TAINT.toleration_any_value(), GPU_TAINT.toleration_any_value()]


def prefer_non_gpu() -> dict[str, object]:
    """Node affinity that prefers nodes without GPUs, so cluster services leave GPU nodes to jobs."""
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "preference": {"matchExpressions": [{"key": plan.GPU_PRODUCT_LABEL, "operator": "DoesNotExist"}]},
    }]}}


def gpu_node_affinity() -> dict[str, object]:
    """Required node affinity: only nodes that carry a GPU product label."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
        "matchExpressions": [{"key": plan.GPU_PRODUCT_LABEL, "operator": "Exists"}]}]}}}


def team_gpu_tolerations(team: str) -> list[dict[str, str]]:
    """Tolerations for a team's racks, GPU or not: its own team taint and the GPU taint."""
    return [team_taint(team).toleration(), GPU_TAINT.toleration()]
