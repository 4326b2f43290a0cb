"""Every Kubernetes object the cluster layer sends is valid for the environment's Kubernetes version."""

from __future__ import annotations

import copy
import socket

import kubernetes_validate
import pytest

ENVS = ["lab", "dev", "prod"]


@pytest.mark.parametrize("env", ENVS)
def test_every_object_validates_against_the_environments_kubernetes_schema(rendered, env):
    r = rendered(env)
    objects = r.objects()
    assert len(objects) > 40
    version = r.plan.env.kubernetes.version
    for obj in objects:
        try:
            kubernetes_validate.validate(obj.manifest, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj.name}: {exc.message} at {'.'.join(map(str, exc.path))}")


def test_the_validator_runs_offline_and_catches_a_wrong_field(rendered, monkeypatch):
    """Guards the test above: the bundled schemas are used (no network) and a misspelt field is rejected."""
    r = rendered("dev")

    def no_network(*args, **kwargs):
        raise AssertionError("kubernetes-validate tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    deployment = copy.deepcopy(r.one("Deployment", "coredns", "kube-system").manifest)
    kubernetes_validate.validate(deployment, r.plan.env.kubernetes.version, strict=True)
    deployment["spec"]["template"]["spec"]["tolerations"][0]["operater"] = "Exists"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, r.plan.env.kubernetes.version, strict=True)


def test_pulumi_logical_names_are_unique(rendered):
    names = [o.name for o in rendered("prod").objects()]
    assert len(names) == len(set(names))
