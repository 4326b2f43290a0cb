"""The research batch layer: priority classes, one namespace and quota per team, capacity balloons.

Balloons are placeholder pods (``pause``) that keep headroom free on a team's **own on-prem
racks** for its normal and deadline work. On-prem racks are always on and are no autoscaler
node group, so a balloon there is not about warming machines: it is about who may use them.
Its priority sits between preemptible and normal jobs: preemptible jobs (which checkpoint
and take their grace period to leave) cannot take the headroom, while a normal or high job
preempts a balloon at once (grace period 0) and starts without waiting for anyone to
checkpoint. Balloons never preempt (``preemptionPolicy: Never``): they only take free nodes,
ahead of preemptible pods in the scheduling queue. Their priority is above
cluster-autoscaler's expendable cutoff (set just above preemptible jobs, which it ignores), so
the autoscaler counts them as real pods,
and because they select their team's racks, which no cloud pool's nodes carry, a pending
balloon never scales a pool up: cloud capacity is not what they hold.

They live in their own namespace, outside every team quota: a balloon that counted against a
team's GPU quota would make the quota refuse the very jobs that should preempt it (quota
admission runs before the scheduler can preempt anything).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import config
from .. import plan as planmod
from . import isolation
from . import labels as lb
from . import objects as o

BALLOON_NAMESPACE = "skyrack-balloons"
GPU_RESOURCE = "nvidia.com/gpu"
POD_SECURITY = "pod-security.kubernetes.io"  # Pod Security Admission's label prefix (built into the API server)


@dataclass(frozen=True)
class Priority:
    name: str
    value: int
    description: str
    global_default: bool = False
    preempts: bool = True


BALLOON_PRIORITY = "skyrack-balloon"
PREEMPTIBLE_VALUE = 100

PRIORITIES = (
    Priority("skyrack-preemptible", PREEMPTIBLE_VALUE,
             "Opportunistic jobs: run on spare capacity, preempted by normal work."),
    Priority(BALLOON_PRIORITY, 500, "Headroom on a team's racks: preemptible jobs cannot take it, normal and "
             "high jobs preempt it at once; never preempts.", preempts=False),
    Priority("skyrack-normal", 1000, "Default for research jobs.", global_default=True),
    Priority("skyrack-high", 10000, "Deadline work: preempts normal and preemptible jobs."),
)


# cluster-autoscaler's --expendable-pods-priority-cutoff (its default is -10): pods below it neither scale a pool
# up nor keep a node from scaling down. Preemptible jobs are below it: they run on capacity that exists for
# other work and never pin a pool at its maximum; balloons and every other class are above it.
AUTOSCALER_EXPENDABLE_CUTOFF = PREEMPTIBLE_VALUE + 1


def priority_classes() -> list[o.Manifest]:
    return [o.obj("scheduling.k8s.io/v1", "PriorityClass", p.name, value=p.value, description=p.description,
                  globalDefault=p.global_default,
                  preemptionPolicy="PreemptLowerPriority" if p.preempts else "Never")
            for p in PRIORITIES]


def team_quota(team: config.Team, layer: config.TeamLayer) -> dict[str, str]:
    """ResourceQuota `hard` for a team: GPUs from `teams[].gpu_quota`, the rest from `cluster.teams`."""
    hard: dict[str, str] = {}
    if team.gpu_quota is not None:
        hard[f"requests.{GPU_RESOURCE}"] = str(team.gpu_quota)
    if layer.cpu is not None:
        hard["requests.cpu"] = layer.cpu
    if layer.memory is not None:
        hard["requests.memory"] = layer.memory
    if layer.pods is not None:
        hard["pods"] = str(layer.pods)
    return hard


def pod_security_labels(layer: config.TeamLayer, minor: int) -> dict[str, str]:
    """Pod Security Admission's labels for a team's namespace: the team's level, enforced as the cluster's own
    minor defines it (pinned, so an upgrade changes the rules only when the layer is applied with it)."""
    return {f"{POD_SECURITY}/enforce": layer.pod_security, f"{POD_SECURITY}/enforce-version": f"v1.{minor}"}


def team_objects(team: config.Team, layer: config.TeamLayer, minor: int) -> list[o.Manifest]:
    """The team's namespace (its Pod Security level enforced), its quota, and the requests a container that
    names none is given (a LimitRange's defaultRequest only: no limit is imposed on a pod that did not ask
    for one)."""
    team_label = {planmod.TEAM_LABEL: team.name}
    d = layer.container_defaults
    return [o.obj("v1", "Namespace", team.name, labels={**team_label, **pod_security_labels(layer, minor)},
                  annotations=isolation.team_namespace_annotations(layer)),
            o.obj("v1", "ResourceQuota", "team-quota", team.name, labels=team_label,
                  spec={"hard": team_quota(team, layer)}),
            o.obj("v1", "LimitRange", "team-defaults", team.name, labels=team_label,
                  spec={"limits": [{"type": "Container", "defaultRequest": {"cpu": d.cpu, "memory": d.memory}}]})]


def balloon(team: str, b: config.Balloon, pause_image: str) -> o.Manifest:
    labels = {"app.kubernetes.io/name": "balloon", planmod.TEAM_LABEL: team}
    requests = {"cpu": b.cpu, "memory": b.memory}
    limits: dict[str, str] = {}
    if b.gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(b.gpus)  # extended resources: limit == request
    pod = {"priorityClassName": BALLOON_PRIORITY, "terminationGracePeriodSeconds": 0,
           "nodeSelector": {planmod.TEAM_LABEL: team},
           "tolerations": lb.team_gpu_tolerations(team),
           "containers": [o.container("pause", pause_image, requests=requests, limits=limits or None,
                                      securityContext={"allowPrivilegeEscalation": False,
                                                       "runAsNonRoot": True, "runAsUser": 65535})]}
    return o.workload("Deployment", f"balloon-{team}", BALLOON_NAMESPACE, pod, labels=labels, replicas=b.replicas)


def manifests(p: planmod.Plan) -> list[o.Manifest]:
    cluster = p.env.cluster
    out = priority_classes()
    for team in p.env.teams:
        out += team_objects(team, cluster.teams.get(team.name, config.TeamLayer()), p.env.kubernetes.minor)
    balloons = [(t, layer.balloon) for t, layer in cluster.teams.items() if layer.balloon.replicas]
    if balloons:
        out.append(o.obj("v1", "Namespace", BALLOON_NAMESPACE, labels=isolation.cluster_service_labels()))
        out += [balloon(team, b, cluster.versions.pause) for team, b in balloons]
    return out
