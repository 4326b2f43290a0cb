"""The research batch layer: per-team namespaces and quotas, balloons, and placement that
matches the labels and taints the rack join puts on nodes (from the plan)."""

from __future__ import annotations

import pytest
import yaml

from skyrack import config
from skyrack import plan as planmod
from skyrack.kube import batch, layer, objects

from .conftest import run_program
from .placement import can_run_on, live_labels, pod_spec

ENVS = ["dev", "prod"]


@pytest.mark.parametrize("env", ENVS)
def test_one_namespace_and_quota_per_team_from_the_environment_file(rendered, env):
    r = rendered(env)
    teams = r.plan.env.teams
    team_namespaces = [o for o in r.objects("Namespace") if "skyrack.io/team" in o.manifest["metadata"]["labels"]]
    assert sorted(o.manifest["metadata"]["name"] for o in team_namespaces) == sorted(t.name for t in teams)
    quotas = r.objects("ResourceQuota")
    assert len(quotas) == len(teams)
    for team in teams:
        hard = r.one("ResourceQuota", "team-quota", team.name).manifest["spec"]["hard"]
        layer_ = r.plan.env.cluster.teams[team.name]
        assert hard == {"requests.nvidia.com/gpu": str(team.gpu_quota), "requests.cpu": layer_.cpu,
                        "requests.memory": layer_.memory, "pods": str(layer_.pods)}


def test_a_container_that_asks_for_nothing_gets_the_teams_default_requests_and_no_limit(env_copy, rendered):
    """With a cpu or memory quota the API server refuses a pod without requests: each team namespace has a
    LimitRange whose defaultRequest fills them in (100m / 256Mi, or the team's `container_defaults`)."""
    r = rendered("dev")
    for team in r.plan.env.teams:
        spec = r.one("LimitRange", "team-defaults", team.name).manifest["spec"]
        assert spec == {"limits": [{"type": "Container", "defaultRequest": {"cpu": "100m", "memory": "256Mi"}}]}
    path = env_copy("dev")
    data = yaml.safe_load(path.read_text())
    team = r.plan.env.teams[0]
    data["cluster"]["teams"][team.name]["container_defaults"] = {"cpu": "250m"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    [_, _, limits] = batch.team_objects(team, config.load(path).cluster.teams[team.name], 37)
    assert limits["spec"]["limits"][0]["defaultRequest"] == {"cpu": "250m", "memory": "256Mi"}


def test_team_namespaces_enforce_the_teams_pod_security_level_at_the_clusters_minor(env_copy, rendered):
    """Baseline by default (no privileged container, host namespace or hostPath: each a way round the team's
    taints, quota and GPUs); a team may be held to `restricted`; the rules are those of the cluster's minor."""
    r = rendered("dev")
    minor = r.plan.env.kubernetes.minor
    for team in r.plan.env.teams:
        labels = r.one("Namespace", team.name).manifest["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
        assert labels["pod-security.kubernetes.io/enforce-version"] == f"v1.{minor}"
    services = [o for o in r.objects("Namespace") if "skyrack.io/team" not in o.manifest["metadata"]["labels"]]
    assert services and not any("pod-security.kubernetes.io/enforce" in o.manifest["metadata"]["labels"]
                                for o in services)  # the GPU health probe and dcgm-exporter run privileged
    path = env_copy("dev")
    data = yaml.safe_load(path.read_text())
    team = r.plan.env.teams[0]
    data["cluster"]["teams"][team.name]["pod_security"] = "restricted"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    [ns, _, _] = batch.team_objects(team, config.load(path).cluster.teams[team.name], minor)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    data["cluster"]["teams"][team.name]["pod_security"] = "privileged"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(config.InputError, match="pod_security"):
        config.load(path)


@pytest.mark.parametrize("env", ENVS)
def test_balloon_sizes_come_from_the_environment_file(rendered, env):
    r = rendered(env)
    wanted = {t: layer_.balloon for t, layer_ in r.plan.env.cluster.teams.items() if layer_.balloon.replicas}
    assert wanted, "the shipped environment should hold some capacity with balloons"
    balloons = [o for o in r.objects("Deployment") if o.manifest["metadata"]["name"].startswith("balloon-")]
    assert len(balloons) == len(wanted)
    for team, b in wanted.items():
        m = r.one("Deployment", f"balloon-{team}", batch.BALLOON_NAMESPACE).manifest
        assert m["spec"]["replicas"] == b.replicas
        res = pod_spec(m)["containers"][0]["resources"]
        assert res["requests"] == {"cpu": b.cpu, "memory": b.memory, "nvidia.com/gpu": str(b.gpus)}
        assert res["limits"] == {"nvidia.com/gpu": str(b.gpus)}
        assert pod_spec(m)["priorityClassName"] == "skyrack-balloon"


def test_balloons_are_headroom_for_normal_work_that_preemptible_jobs_cannot_take(rendered):
    """What balloons are for (docs/kube.md): free nodes on a team's racks, kept from preemptible jobs, and the
    first work a normal or high job takes (upstream's preemption evicts the least important victims first)."""
    r = rendered("dev")
    classes = {o.manifest["metadata"]["name"]: o.manifest for o in r.objects("PriorityClass")}
    # the order work is taken in: balloons, then preemptible jobs, then normal work
    order = sorted(classes, key=lambda n: classes[n]["value"])
    assert order == ["skyrack-balloon", "skyrack-preemptible", "skyrack-normal", "skyrack-high"]
    # normal (the default) and high preempt; a balloon and a preemptible job never do, so a preemptible job
    # cannot take a balloon's node although it ranks above it
    assert {n for n, c in classes.items() if c["preemptionPolicy"] == "Never"} == {"skyrack-balloon",
                                                                                    "skyrack-preemptible"}
    assert [n for n, c in classes.items() if c["globalDefault"]] == ["skyrack-normal"]
    # Expendable to cluster-autoscaler (pods below its cutoff neither trigger scale-up nor hold a node): both
    # never scale a pool to its maximum and pin it there (#25); normal and high work does scale it
    flags = pod_spec(r.one("Deployment", "cluster-autoscaler", "kube-system").manifest)["containers"][0]["command"]
    cutoff, = [int(f.split("=", 1)[1]) for f in flags if f.startswith("--expendable-pods-priority-cutoff=")]
    assert {n for n, c in classes.items() if c["value"] < cutoff} == {"skyrack-balloon", "skyrack-preemptible"}
    # and a balloon never holds cloud capacity: no pool node can take it
    pod = pod_spec(r.one("Deployment", "balloon-robotics", batch.BALLOON_NAMESPACE).manifest)
    for pool in r.plan.pools:
        pool_labels = {"skyrack.io/env": r.plan.env.name, planmod.POOL_LABEL: pool.name,
                       "kubernetes.io/os": "linux"}
        assert not can_run_on(pod, pool_labels, [])
    assert pod["terminationGracePeriodSeconds"] == 0  # a preempting job waits for nobody
    # outside every team's quota, or the quota would refuse the jobs that should preempt them
    assert batch.BALLOON_NAMESPACE not in {o.manifest["metadata"]["namespace"] for o in r.objects("ResourceQuota")}


@pytest.mark.parametrize("env", ENVS)
def test_a_teams_balloon_fits_its_own_racks_and_no_other_teams(rendered, env):
    r = rendered(env)
    for team in r.plan.env.cluster.teams:
        pod = pod_spec(r.one("Deployment", f"balloon-{team}", batch.BALLOON_NAMESPACE).manifest)
        seen_racks = set()
        for node in r.plan.nodes:
            if node.rack in seen_racks:
                continue
            seen_racks.add(node.rack)
            assert can_run_on(pod, live_labels(node), node.taints) == (node.team == team), (team, node.rack)


@pytest.mark.parametrize("env", ENVS)
def test_cluster_services_can_run_on_every_rack(rendered, env):
    """On-prem racks are all tainted and cloud pools may be at zero: DNS and metrics must still find a node.
    (The autoscaler runs on the API servers, where its Azure identity is: tests/kube/test_autoscaler.py.)"""
    r = rendered(env)
    services = [r.one("Deployment", "coredns", "kube-system"), r.one("Deployment", "prometheus", "skyrack-monitoring")]
    for svc in services:
        for node in {n.rack: n for n in r.plan.nodes}.values():
            assert can_run_on(pod_spec(svc.manifest), live_labels(node), node.taints), (svc.name, node.rack)


def test_an_unknown_team_in_the_cluster_section_is_a_clear_error(env_copy):
    path = env_copy("dev")
    path.write_text(path.read_text().replace("    robotics:\n      cpu:", "    robotcs:\n      cpu:"))
    with pytest.raises(config.InputError) as exc:
        config.load(path)
    assert [str(p) for p in exc.value.problems] == [
        f"{path}: cluster.teams.robotcs: unknown team 'robotcs' (teams: robotics)"]


def test_balloon_sizes_follow_an_edit_of_the_environment_file(env_copy, ca):
    from skyrack import plan as planmod

    from .conftest import NOW, control_plane_outputs

    path = env_copy("dev")
    path.write_text(path.read_text().replace("balloon: {replicas: 1, gpus: 8,", "balloon: {replicas: 3, gpus: 4,"))
    p = planmod.make(path)
    res = run_program("dev", lambda: layer.ClusterLayer("c", p, control_plane_outputs(p, ca), now=NOW,
                                                        wait_timeout_s=None))
    (dep,) = [x for x in res if x.kind == "Deployment" and x.manifest["metadata"]["name"] == "balloon-robotics"]
    assert dep.manifest["spec"]["replicas"] == 3
    assert pod_spec(dep.manifest)["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}


def test_a_priority_class_is_replaced_when_what_the_api_server_will_not_change_changes(monkeypatch):
    """value and preemptionPolicy are immutable: Pulumi replaces the class (the old one deleted first, same name)
    instead of failing on an update the API server refuses (this change moved the balloons from 500 to 50)."""
    import pulumi

    made = []

    class Recorder:
        def __init__(self, name, opts=None, **kwargs):
            made.append((name, opts, kwargs))

    monkeypatch.setattr(objects, "resource_class", lambda api, kind: Recorder)
    for m in batch.priority_classes():
        objects.create(m, pulumi.ResourceOptions())
    assert len(made) == len(batch.PRIORITIES)
    for name, opts, kwargs in made:
        assert (opts.replace_on_changes, opts.delete_before_replace) == (["value", "preemptionPolicy"], True), name
        assert not any(k.startswith("_") for k in kwargs)  # the private key is never sent
