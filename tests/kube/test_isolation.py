"""Team isolation as the cluster layer declares it: two ValidatingAdmissionPolicies, their bindings, and the
namespaces they read (a team's label and priority classes) or leave alone (the cluster's own services).

What the real API server makes of them (a foreign toleration, a class the team may not use, refused with
the policy named): tests/lab/test_kubernetes_layer.py.
"""

from __future__ import annotations

import pytest
import yaml

from skyrack import config
from skyrack import plan as planmod
from skyrack.errors import InputError
from skyrack.kube import batch, isolation

from .conftest import CONFIGS

ENVS = ["lab", "dev", "prod"]


def exempt(ns: dict) -> bool:
    """Whether the bindings' namespaceSelector leaves this Namespace out (evaluated here as the API server
    would: every matchExpression must hold for the policy to apply)."""
    labels = {**ns["metadata"].get("labels", {}), "kubernetes.io/metadata.name": ns["metadata"]["name"]}
    return ns["metadata"]["name"] in isolation.KUBERNETES_NAMESPACES or isolation.CLUSTER_SERVICE_LABEL in labels


@pytest.mark.parametrize("env", ENVS)
def test_both_policies_deny_pods_outside_the_clusters_own_namespaces(rendered, env):
    r = rendered(env)
    for name in (isolation.TOLERATIONS_POLICY, isolation.PRIORITIES_POLICY):
        policy = r.one("ValidatingAdmissionPolicy", name).manifest["spec"]
        assert policy["failurePolicy"] == "Fail"
        rules = {r["resources"][0]: r for r in policy["matchConstraints"]["resourceRules"]}
        assert all(len(r["resources"]) == 1 and sorted(r["operations"]) == ["CREATE", "UPDATE"] for r in rules.values())
        assert (rules["pods"]["apiGroups"], rules["pods"]["apiVersions"]) == ([""], ["v1"])
        # a gang's pods take their PodGroup's priority: its class is limited like a pod's (whatever version is served)
        assert set(rules) == ({"pods", "podgroups"} if name == isolation.PRIORITIES_POLICY else {"pods"})
        if "podgroups" in rules:
            assert (rules["podgroups"]["apiGroups"], rules["podgroups"]["apiVersions"]) == (["scheduling.k8s.io"], ["*"])
        binding = r.one("ValidatingAdmissionPolicyBinding", name).manifest["spec"]
        assert binding["policyName"] == name and binding["validationActions"] == ["Deny"]
        exprs = {e["key"]: e for e in binding["matchResources"]["namespaceSelector"]["matchExpressions"]}
        assert exprs["kubernetes.io/metadata.name"] == {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                        "values": ["kube-system", "kube-public", "kube-node-lease"]}
        assert exprs[isolation.CLUSTER_SERVICE_LABEL]["operator"] == "DoesNotExist"


@pytest.mark.parametrize("env", ENVS)
def test_every_pod_the_layer_runs_that_tolerates_a_team_taint_is_in_an_exempt_namespace(rendered, env):
    """Otherwise the policies would refuse the cluster's own services (CoreDNS, the GPU plugin, balloons...)."""
    r = rendered(env)
    namespaces = {o.manifest["metadata"]["name"]: o.manifest for o in r.objects("Namespace")}
    teams = {t.name for t in r.plan.env.teams}
    checked = 0
    for obj in r.objects():
        m = obj.manifest
        pod = m.get("spec", {}).get("template", {}).get("spec")
        if pod is None:
            continue
        ns = m["metadata"]["namespace"]
        for t in pod.get("tolerations", []):
            if t.get("key", "") in ("", planmod.TEAM_TAINT_KEY):
                checked += 1
                assert ns in isolation.KUBERNETES_NAMESPACES or exempt(namespaces[ns]) or (
                    ns in teams and t.get("value") == ns), (m["kind"], m["metadata"]["name"], ns, t)
    assert checked  # CoreDNS and node-local-dns at least tolerate every team


@pytest.mark.parametrize("env", ENVS)
def test_a_team_namespace_carries_its_team_and_its_priority_classes(rendered, env):
    r = rendered(env)
    layers = r.plan.env.cluster.teams
    for team in r.plan.env.teams:
        ns = r.one("Namespace", team.name).manifest["metadata"]
        assert ns["labels"][planmod.TEAM_LABEL] == team.name and not exempt({"metadata": ns})
        want = layers.get(team.name, config.TeamLayer()).priority_classes
        assert ns["annotations"][isolation.PRIORITY_CLASSES_ANNOTATION].split(",") == want


def test_the_lab_gives_deadline_work_to_one_team_only():
    """What tests/lab exercises: robotics may use skyrack-high, vision (the default) may not."""
    p = planmod.make(CONFIGS / "lab.yaml")
    assert "skyrack-high" in p.env.cluster.teams["robotics"].priority_classes
    assert "vision" not in p.env.cluster.teams
    assert "skyrack-high" not in config.DEFAULT_TEAM_PRIORITY_CLASSES


def test_the_classes_a_team_may_name_are_the_classes_the_layer_creates():
    created = {p.name for p in batch.PRIORITIES}
    assert set(config.DEFAULT_TEAM_PRIORITY_CLASSES) < created
    allowed = set(config.schema.TeamPriorityClass.__args__)
    assert allowed == created - {batch.BALLOON_PRIORITY}  # the balloons' class is theirs alone
    # the policy's default for a namespace of no team is the same list, spelt as a CEL list
    policy = isolation.manifests()[2]["spec"]
    assert policy["variables"][0]["expression"].endswith(repr(list(config.DEFAULT_TEAM_PRIORITY_CLASSES)))


@pytest.mark.parametrize("classes, words", [
    (["skyrack-high"], "must include skyrack-normal"),
    (["skyrack-normal", "skyrack-normal"], "listed twice"),
    (["skyrack-normal", "skyrack-balloon"], "skyrack-balloon"),
    ("skyrack-normal", "list"),
])
def test_a_bad_priority_class_list_is_one_clear_error(tmp_path, classes, words):
    doc = yaml.safe_load((CONFIGS / "lab.yaml").read_text())
    doc["cluster"]["teams"]["robotics"]["priority_classes"] = classes
    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as exc:
        config.load(path)
    text = str(exc.value)
    assert "cluster.teams.robotics.priority_classes" in text and words in text, text
