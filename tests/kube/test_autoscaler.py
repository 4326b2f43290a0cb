"""cluster-autoscaler: node groups are exactly the cloud pools, and one scale-down is bounded."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from skyrack import config
from skyrack import plan as planmod
from skyrack.kube import autoscaler, layer
from skyrack.kube import labels as lb
from skyrack.render import cloud_init
from support import is_secret

from .conftest import CONFIGS, NOW, control_plane_outputs, run_program
from .placement import can_run_on, live_labels, pod_spec


def flags(manifest: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for arg in pod_spec(manifest)["containers"][0]["command"][1:]:
        key, _, value = arg.partition("=")
        out.setdefault(key, []).append(value)
    return out


@pytest.mark.parametrize(("env", "bound"), [("dev", 10), ("prod", 30)])
def test_one_scale_down_removes_at_most_the_configured_share(rendered, env, bound):
    r = rendered(env)
    f = flags(r.one("Deployment", "cluster-autoscaler", "kube-system").manifest)
    share = r.plan.env.cluster.autoscaler.max_scale_down_share
    assert bound == math.floor(share * sum(p.max for p in r.plan.pools))  # the figure in the env file's comment
    # In 1.31 --max-scale-down-parallelism bounds empty-node deletion too (what --max-empty-bulk-delete did).
    for key in ("--max-scale-down-parallelism", "--max-drain-parallelism"):
        assert f[key] == [str(bound)], key
    minutes = r.plan.env.cluster.autoscaler.scale_down_unneeded_minutes
    assert f["--scale-down-delay-after-delete"] == [f"{minutes}m"]


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_node_groups_are_the_cloud_pools_only(rendered, env):
    r = rendered(env)
    f = flags(r.one("Deployment", "cluster-autoscaler", "kube-system").manifest)
    assert f["--cloud-provider"] == ["azure"]
    # the scale sets as the control-plane stack names them
    assert f["--nodes"] == [f"{p.min}:{p.max}:skyrack-{env}-{p.name}" for p in r.plan.pools]


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_it_runs_on_the_api_servers_only_where_its_azure_identity_is(rendered, env):
    """The control plane attaches the autoscaler's managed identity to the API-server VMs (skyrack.azure.autoscaler),
    reached through their metadata service on the host network; racks have no metadata service, pool nodes no
    identity (and may all be gone)."""
    r = rendered(env)
    pod = pod_spec(r.one("Deployment", "cluster-autoscaler", "kube-system").manifest)
    assert pod["hostNetwork"] is True
    plain = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    taint = lb.CONTROL_PLANE_TAINT
    for member in r.plan.members_of("apiserver"):  # as kubeadm registers it: its label, the taint in kubeadm.yaml.j2
        labels = {**plain, "kubernetes.io/hostname": member.name, lb.CONTROL_PLANE_LABEL: "",
                  planmod.DISRUPTION_EXEMPT_LABEL: "true"}
        assert can_run_on(pod, labels, [f"{taint.key}={taint.value}:{taint.effect}"]), member.name
    kubeadm = (Path(cloud_init.__file__).parents[1] / "templates/cloud-init/kubeadm.yaml.j2").read_text()
    assert f"- key: {taint.key}\n      effect: {taint.effect}\n" in kubeadm  # the taint the API servers carry
    for node in {n.rack: n for n in r.plan.nodes}.values():
        assert not can_run_on(pod, live_labels(node), node.taints), node.rack
    for pool in r.plan.pools:
        labels = {**plain, planmod.ENV_LABEL: env, planmod.POOL_LABEL: pool.name, planmod.DISRUPTION_EXEMPT_LABEL: "true"}
        assert not can_run_on(pod, labels, []), pool.name


def test_a_lab_without_cloud_pools_runs_no_autoscaler(rendered):
    assert not [o for o in rendered("lab").objects() if "autoscaler" in o.name]


def test_scale_set_names_and_credentials_come_from_the_control_plane_stack(ca):
    import pulumi

    p = planmod.make(CONFIGS / "dev.yaml")
    cp = control_plane_outputs(p, ca, scale_sets=pulumi.Output.from_input({"cpu": "vmss-dev-cpu-7f3a"}),
                               autoscaler_credentials=pulumi.Output.secret({"ARM_CLIENT_ID": "id",
                                                                            "ARM_CLIENT_SECRET": "s3cret"}))
    res = run_program("dev", lambda: layer.ClusterLayer("c", p, cp, now=NOW, wait_timeout_s=None))
    (dep,) = [x for x in res if x.kind == "Deployment" and x.manifest["metadata"]["name"] == "cluster-autoscaler"]
    assert flags(dep.manifest)["--nodes"] == ["0:100:vmss-dev-cpu-7f3a"]
    (secret,) = [x for x in res
                 if x.kind == "Secret" and x.manifest["metadata"]["name"] == autoscaler.CREDENTIALS_SECRET]

    assert is_secret(secret.inputs["stringData"])
    assert secret.manifest["stringData"] == {"ARM_VM_TYPE": "vmss", "ARM_CLIENT_ID": "id",
                                             "ARM_CLIENT_SECRET": "s3cret"}


def test_a_scale_down_share_above_half_is_refused(env_copy):
    path = env_copy("dev")
    path.write_text(path.read_text().replace("max_scale_down_share: 0.1", "max_scale_down_share: 0.8"))
    with pytest.raises(config.InputError) as exc:
        config.load(path)
    (problem,) = exc.value.problems
    assert problem.path == "cluster.autoscaler.max_scale_down_share"
    assert "0.5" in problem.message


# Flags cluster-autoscaler marks DEPRECATED in its help text since 1.31 (cluster-autoscaler/main.go of the
# release-1.31 branch): "max-empty-bulk-delete ... DEPRECATED: Use --max-scale-down-parallelism instead."
# and "ignore-taint" (use --startup-taint); still deprecated, not removed, in 1.37. A deprecated flag is
# removed in a later release.
DEPRECATED_IN_1_31 = {"--max-empty-bulk-delete", "--ignore-taint"}


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_no_flag_the_pinned_autoscaler_deprecates(rendered, env):
    r = rendered(env)
    assert r.plan.env.cluster.versions.cluster_autoscaler.rsplit(":", 1)[1].startswith("v1.37.")
    f = flags(r.one("Deployment", "cluster-autoscaler", "kube-system").manifest)
    assert not DEPRECATED_IN_1_31 & set(f)
