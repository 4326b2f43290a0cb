"""The scheduler configuration cloud-init embeds on the API-server VMs, checked against its API type."""

from __future__ import annotations

import pydantic
import pytest
import yaml

from skyrack import config, scheduler
from skyrack.kube import scheduling

from .conftest import CONFIGS
from .scheduler_types import CoschedulingArgs, KubeSchedulerConfiguration


@pytest.mark.parametrize("env", ["lab", "dev", "prod"])
def test_scheduler_config_is_a_valid_kube_scheduler_configuration_with_coscheduling(env):
    e = config.load(CONFIGS / f"{env}.yaml")
    text = scheduler.scheduler_config_yaml(e)
    cfg = KubeSchedulerConfiguration.model_validate(yaml.safe_load(text))
    (profile,) = cfg.profiles
    assert profile.schedulerName == "default-scheduler"  # every pod, gang or not, goes through it
    assert [p.name for p in profile.plugins.queueSort.enabled] == ["Coscheduling"]
    assert [p.name for p in profile.plugins.multiPoint.enabled] == ["Coscheduling"]
    (plugin_config,) = profile.pluginConfig
    args = CoschedulingArgs.model_validate(plugin_config.args)
    assert args.permitWaitingTimeSeconds == e.cluster.gang_permit_wait_seconds
    assert cfg.leaderElection.leaderElect is True
    assert cfg.clientConnection.kubeconfig == scheduler.DEFAULT_KUBECONFIG


def test_the_type_check_rejects_what_kube_scheduler_would_reject():
    """Guards the test above: a misspelt field and mismatched queue sorts fail."""
    e = config.load(CONFIGS / "dev.yaml")
    data = scheduler.scheduler_config(e)
    data["profiles"][0]["plugins"]["queuesort"] = data["profiles"][0]["plugins"].pop("queueSort")
    with pytest.raises(pydantic.ValidationError):
        KubeSchedulerConfiguration.model_validate(data)
    data = scheduler.scheduler_config(e)
    data["profiles"].append({"schedulerName": "other"})
    with pytest.raises(pydantic.ValidationError, match="queueSort"):
        KubeSchedulerConfiguration.model_validate(data)


def test_cloud_init_can_pass_its_own_kubeconfig_path():
    e = config.load(CONFIGS / "dev.yaml")
    data = yaml.safe_load(scheduler.scheduler_config_yaml(e, kubeconfig="/etc/skyrack/scheduler.kubeconfig"))
    assert data["clientConnection"]["kubeconfig"] == "/etc/skyrack/scheduler.kubeconfig"


def test_the_scheduler_may_read_podgroups_and_the_crd_serves_them(rendered):
    r = rendered("dev")
    crd = r.one("CustomResourceDefinition", f"podgroups.{scheduling.GROUP}").manifest
    assert crd["spec"]["group"] == scheduling.POD_GROUP_LABEL.split("/")[0]
    assert crd["spec"]["names"]["kind"] == "PodGroup"
    assert [v["name"] for v in crd["spec"]["versions"] if v["served"]] == ["v1alpha1"]
    binding = r.one("ClusterRoleBinding", "skyrack:scheduler-plugins").manifest
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": "system:kube-scheduler"}]
    rules = r.one("ClusterRole", "skyrack:scheduler-plugins").manifest["rules"]
    assert {"get", "list", "watch"} <= set(rules[0]["verbs"]) and "podgroups" in rules[0]["resources"]
