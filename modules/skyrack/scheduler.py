"""The scheduler the API-server VMs run: kube-scheduler with upstream's gang scheduling.

Gang scheduling is Kubernetes' own since 1.35 (KEP-4671, "workload-aware scheduling"): a PodGroup
(`scheduling.k8s.io/v1beta1` in 1.37) whose `schedulingPolicy.gang.minCount` says how many pods
must fit together, and pods that name it in `spec.schedulingGroup.podGroupName`. kube-scheduler's
GangScheduling plugin binds none of them until `minCount` of them can be placed, and lets a
waiting gang go after 5 minutes (upstream's fixed permit timeout). In 1.37 it is beta and off by
default: the API servers serve the API and every control-plane component runs with the feature gate
(`GANGS`, per minor: passed by kubeadm's ClusterConfiguration), and the plugin then
joins the default profile by itself. The RBAC it needs (the scheduler reads PodGroups, team
members write them through `edit`) is upstream's bootstrap policy, on once the gate is.

The same gate turns on workload-aware preemption (KEP-5710; in 1.36 a gate of its own): the scheduler
treats a pending gang as one preemptor and a running gang whose PodGroup says ``disruptionMode: all``
as one victim, so a higher-priority gang evicts whole gangs, never one pod from each of several. It
ranks a gang's pods by the PodGroup's priority, not their own (a PodGroup without a class gets the
cluster's default, ``skyrack-normal``): `whole_gang` gives both, and the team policy that limits a
pod's priority class limits a PodGroup's (kube.isolation).

The configuration is core, a pure function of the environment: cloud-init writes it on each
API-server VM (`render.cloud_init` embeds ``scheduler_config_yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from . import config, tuning

DEFAULT_KUBECONFIG = "/etc/kubernetes/scheduler.conf"


@dataclass(frozen=True)
class Gangs:
    """What one Kubernetes minor needs for gang scheduling: the PodGroup API's version and the feature gates."""

    api: str  # the PodGroup API (served only when asked for: `runtime_config`)
    gates: dict[str, bool]

    @property
    def runtime_config(self) -> str:
        return f"{self.api}=true"

    @property
    def feature_gates(self) -> str:
        """`--feature-gates` of kube-apiserver, kube-controller-manager and kube-scheduler."""
        return ",".join(f"{name}={str(on).lower()}" for name, on in sorted(self.gates.items()))


# Per minor the lab builds (skyrack.upstream.KUBERNETES_BUILDS). In 1.36 the API is alpha (v1alpha2) and the
# plugin has its own gate; 1.37 serves v1beta1 and GenericWorkload alone turns both on. An alpha API's objects
# do not survive an upgrade (1.37 no longer decodes v1alpha2): docs/join.md says what an upgrade from 1.36 does.
# TopologyAwareWorkloadScheduling (KEP-5732, alpha since 1.36) lets a PodGroup name the node label its gang
# shares (`schedulingConstraints.topology`): the scheduler picks a rack or segment with room for every pod
# before it places one. Alpha, so off upstream; skyrack turns it on for the reason docs/kube.md gives, on the
# minor whose PodGroups `skyrack job` makes (an upgrade's source minor keeps what it had).
GANGS = {
    36: Gangs("scheduling.k8s.io/v1alpha2", {"GenericWorkload": True, "GangScheduling": True}),
    37: Gangs("scheduling.k8s.io/v1beta1", {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True}),
}
NEWEST = max(GANGS)
POD_GROUP_API = GANGS[NEWEST].api  # the lab's (configs/lab.yaml runs the newest minor)


def gangs(version: str) -> Gangs:
    """The gang settings of a Kubernetes version (`1.37.2`); a newer minor than skyrack knows gets the newest's."""
    return GANGS.get(int(version.split(".")[1]), GANGS[NEWEST])


def whole_gang(priority_class: str, topology_key: str | None = None) -> dict[str, Any]:
    """A PodGroup's spec fields for a gang that is preempted whole and ranked by its job's priority class,
    and, given a node label, placed whole within one value of it (one rack, one segment)."""
    spec: dict[str, Any] = {"priorityClassName": priority_class, "disruptionMode": {"all": {}}}
    if topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    return spec


def scheduler_config(env: config.Environment, kubeconfig: str = DEFAULT_KUBECONFIG) -> dict[str, Any]:
    """KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1): upstream's default profile, which has
    the GangScheduling plugin when the feature gate is on; one leader-elected scheduler per API-server VM.
    Its client's QPS and burst follow the cluster's size (skyrack.tuning)."""
    load = tuning.control_plane(env.node_count, env.control_plane.apiservers.count)
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig, "qps": load.scheduler_qps, "burst": load.scheduler_burst},
        "leaderElection": {"leaderElect": True, "resourceNamespace": "kube-system", "resourceName": "kube-scheduler"},
        "profiles": [{"schedulerName": "default-scheduler"}],
    }


def scheduler_config_yaml(env: config.Environment, kubeconfig: str = DEFAULT_KUBECONFIG) -> str:
    """The file cloud-init writes on each API-server VM and passes to kube-scheduler --config."""
    return yaml.safe_dump(scheduler_config(env, kubeconfig), sort_keys=False)
