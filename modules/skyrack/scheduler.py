"""The scheduler the API-server VMs run: kube-scheduler with upstream's gang scheduling.

Gang scheduling is Kubernetes' own since 1.35 (KEP-4671, "workload-aware scheduling"): a PodGroup
(`scheduling.k8s.io/v1beta1` in 1.37) whose `schedulingPolicy.gang.minCount` says how many pods
must fit together, and pods that name it in `spec.schedulingGroup.podGroupName`. kube-scheduler's
GangScheduling plugin binds none of them until `minCount` of them can be placed, and lets a
waiting gang go after 5 minutes (upstream's fixed permit timeout). In 1.37 it is beta and off by
default: the API servers serve the API and every control-plane component runs with the feature gate
(`FEATURE_GATES`, `RUNTIME_CONFIG`, passed by kubeadm's ClusterConfiguration), and the plugin then
joins the default profile by itself. The RBAC it needs (the scheduler reads PodGroups, team
members write them through `edit`) is upstream's bootstrap policy, on once the gate is.

The configuration is core, a pure function of the environment: cloud-init writes it on each
API-server VM (`render.cloud_init` embeds ``scheduler_config_yaml``).
"""

from __future__ import annotations

from typing import Any

import yaml

from . import config, tuning

DEFAULT_KUBECONFIG = "/etc/kubernetes/scheduler.conf"
POD_GROUP_API = "scheduling.k8s.io/v1beta1"
FEATURE_GATES = {"GenericWorkload": True}  # the Workload and PodGroup API, and the GangScheduling plugin
RUNTIME_CONFIG = f"{POD_GROUP_API}=true"  # a beta API is not served unless asked for


def feature_gates() -> str:
    """`--feature-gates` of kube-apiserver, kube-controller-manager and kube-scheduler."""
    return ",".join(f"{name}={str(on).lower()}" for name, on in sorted(FEATURE_GATES.items()))


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
