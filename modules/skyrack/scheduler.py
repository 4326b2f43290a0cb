"""The KubeSchedulerConfiguration the API-server VMs run: kube-scheduler with gang scheduling.

The scheduler runs on the API-server VMs, configured by cloud-init (`render.cloud_init`
embeds ``scheduler_config_yaml``), not by the cluster layer; so its configuration is core, a
pure function of the environment. What the coscheduling plugin reads in the cluster (the
PodGroup CRD, the scheduler's RBAC) is the cluster layer's: `kube.scheduling`.
"""

from __future__ import annotations

from typing import Any

import yaml

from . import config

PLUGIN = "Coscheduling"
DEFAULT_KUBECONFIG = "/etc/kubernetes/scheduler.conf"


def scheduler_config(env: config.Environment, kubeconfig: str = DEFAULT_KUBECONFIG) -> dict[str, Any]:
    """KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) with coscheduling in the default profile.

    Coscheduling must own queue sorting (pods of a group queue together); queueSort must be the
    same in every profile, so it goes into the one profile every pod uses, `default-scheduler`.
    Pods without a pod-group label are scheduled as before.
    """
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        # one scheduler per API-server VM; only the leader schedules
        "leaderElection": {"leaderElect": True, "resourceNamespace": "kube-system", "resourceName": "kube-scheduler"},
        "profiles": [{
            "schedulerName": "default-scheduler",
            "plugins": {
                "queueSort": {"enabled": [{"name": PLUGIN}], "disabled": [{"name": "*"}]},
                "multiPoint": {"enabled": [{"name": PLUGIN}]},
            },
            "pluginConfig": [{"name": PLUGIN, "args": {
                "permitWaitingTimeSeconds": env.cluster.gang_permit_wait_seconds,
                                                        "podGroupBackoffSeconds": 10}}],
        }],
    }


def scheduler_config_yaml(env: config.Environment, kubeconfig: str = DEFAULT_KUBECONFIG) -> str:
    """The file cloud-init writes on each API-server VM and passes to kube-scheduler --config."""
    return yaml.safe_dump(scheduler_config(env, kubeconfig), sort_keys=False)
