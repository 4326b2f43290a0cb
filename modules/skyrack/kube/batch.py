"""The research batch layer: priority classes, one namespace and quota per team, capacity balloons.

Balloons are placeholder pods (``pause``) that keep headroom free on a team's **own on-prem
racks** for its normal and deadline work. On-prem racks are always on and are no autoscaler
node group, so a balloon there is not about warming machines: it is about who may use them.

The order in which work is taken when a normal or high job needs room is **balloons first, then
preemptible jobs**: balloons have the lowest priority (50), so upstream's preemption, which picks
the machine whose most important victim is least important, evicts a balloon (grace period 0,
nothing lost) before it evicts a preemptible job (which loses its work since the last checkpoint
and takes its grace period to leave). Preemptible jobs (100) are above balloons yet cannot take
their headroom: neither class may preempt (``preemptionPolicy: Never``), so a preemptible job
runs only on machines that are free. The cost of that order: when a machine frees up, a waiting
preemptible job is ahead of a waiting balloon, so a balloon a normal job took comes back only once
no preemptible job is waiting for that machine (docs/kube.md).

Both classes are below cluster-autoscaler's expendable cutoff (set just above preemptible jobs):
the autoscaler never scales a pool up for them and never keeps a node for them. Balloons select
their team's racks, which no cloud pool's nodes carry, so they never hold cloud capacity either.

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
    Priority(BALLOON_PRIORITY, 50, "Headroom on a team's racks: the first work normal and high jobs preempt "
             "(at once); never preempts.", preempts=False),
    Priority("skyrack-preemptible", PREEMPTIBLE_VALUE,
             "Opportunistic jobs: run on free capacity only (never preempt, not even balloons), preempted by "
             "normal work after the balloons.", preempts=False),
    Priority("skyrack-normal", 1000, "Default for research jobs.", global_default=True),
    Priority("skyrack-high", 10000, "Deadline work: preempts normal and preemptible jobs."),
)


# cluster-autoscaler's --expendable-pods-priority-cutoff (its default is -10): pods below it neither scale a pool
# up nor keep a node from scaling down. Preemptible jobs and balloons are below it: they run on capacity that
# exists for other work and never pin a pool at its maximum; normal and high work is above it.
AUTOSCALER_EXPENDABLE_CUTOFF = PREEMPTIBLE_VALUE + 1


def priority_classes() -> list[o.Manifest]:
    """A class's value and preemption policy are immutable in the API: a change replaces the class (the old one
    deleted first, its name being the same); running pods keep the priority they were admitted with."""
    return [{**o.obj("scheduling.k8s.io/v1", "PriorityClass", p.name, value=p.value, description=p.description,
                     globalDefault=p.global_default,
                     preemptionPolicy="PreemptLowerPriority" if p.preempts else "Never"),
             o.REPLACE_ON_CHANGES: ["value", "preemptionPolicy"]}
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
