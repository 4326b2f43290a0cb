"""The scheduler configuration cloud-init embeds on the API-server VMs, and the gang-scheduling switches
every control-plane component gets (skyrack.scheduler); the lab runs them (tests/lab)."""

from __future__ import annotations

import pydantic
import pytest
import yaml

from skyrack import config, scheduler
from skyrack import plan as planmod
from skyrack.render import cloud_init

from .conftest import CONFIGS
from .scheduler_types import KubeSchedulerConfiguration


@pytest.mark.parametrize("env", ["lab", "dev", "prod"])
def test_scheduler_config_is_a_valid_kube_scheduler_configuration_with_upstreams_default_profile(env):
    e = config.load(CONFIGS / f"{env}.yaml")
    cfg = KubeSchedulerConfiguration.model_validate(yaml.safe_load(scheduler.scheduler_config_yaml(e)))
    (profile,) = cfg.profiles
    assert profile.schedulerName == "default-scheduler"  # every pod, gang or not, goes through it
    # no plugin set of its own: upstream's defaults, which gain GangScheduling with the feature gate
    assert profile.plugins is None and profile.pluginConfig is None
    assert cfg.leaderElection.leaderElect is True
    assert cfg.clientConnection.kubeconfig == scheduler.DEFAULT_KUBECONFIG


def test_the_type_check_rejects_what_kube_scheduler_would_reject():
    """Guards the test above: a misspelt field and mismatched queue sorts fail."""
    e = config.load(CONFIGS / "dev.yaml")
    data = scheduler.scheduler_config(e)
    data["profiles"][0]["plugin"] = {}
    with pytest.raises(pydantic.ValidationError):
        KubeSchedulerConfiguration.model_validate(data)
    data = scheduler.scheduler_config(e)
    data["profiles"][0]["plugins"] = {"queueSort": {"enabled": [{"name": "PrioritySort"}]}}
    data["profiles"].append({"schedulerName": "other"})
    with pytest.raises(pydantic.ValidationError, match="queueSort"):
        KubeSchedulerConfiguration.model_validate(data)


def test_cloud_init_can_pass_its_own_kubeconfig_path():
    e = config.load(CONFIGS / "dev.yaml")
    data = yaml.safe_load(scheduler.scheduler_config_yaml(e, kubeconfig="/etc/skyrack/scheduler.kubeconfig"))
    assert data["clientConnection"]["kubeconfig"] == "/etc/skyrack/scheduler.kubeconfig"


def _args(component: dict) -> dict[str, str]:
    return {a["name"]: a["value"] for a in component["extraArgs"]}


@pytest.mark.parametrize("env", ["lab", "dev", "prod"])
def test_every_control_plane_component_runs_with_the_gang_scheduling_gate_and_the_api_is_served(env):
    p = planmod.make(CONFIGS / f"{env}.yaml")
    cluster = yaml.safe_load(cloud_init.cluster_configuration(p))
    for component in ("apiServer", "scheduler", "controllerManager"):
        # the gangs themselves and their topology constraint (alpha; docs/kube.md says why it is on)
        assert _args(cluster[component])["feature-gates"] == \
            "GenericWorkload=true,TopologyAwareWorkloadScheduling=true", component
    assert _args(cluster["apiServer"])["runtime-config"] == "scheduling.k8s.io/v1beta1=true"
    assert _args(cluster["scheduler"])["config"] == cloud_init.SCHEDULER_CONFIG


def test_only_an_environment_that_allows_cgroup_v1_tells_kubelet_so():
    lab = planmod.make(CONFIGS / "lab.yaml")
    prod = planmod.make(CONFIGS / "prod.yaml")
    assert lab.env.kubernetes.allow_cgroup_v1 and not prod.env.kubernetes.allow_cgroup_v1
    assert cloud_init.kubelet_configuration(lab)["failCgroupV1"] is False
    assert "failCgroupV1" not in cloud_init.kubelet_configuration(prod)  # kubelet's default: refuse cgroup v1
