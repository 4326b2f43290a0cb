"""Team isolation the API server enforces: ValidatingAdmissionPolicies (built in, GA since 1.30).

A team's racks carry its taint (``skyrack.io/team=<team>:NoSchedule``) and its jobs tolerate it; a
taint alone keeps out only the pods that do not ask. These policies make the asking a right:

* ``skyrack-team-tolerations``: a pod may tolerate a team taint only in that team's namespace and
  only by its exact value; no pod may tolerate every taint (an empty key with ``Exists``).
* ``skyrack-team-priorities``: a pod, and a PodGroup (the scheduler ranks a gang's pods by their
  PodGroup's priority), may name only the priority classes its team's
  ``cluster.teams.<team>.priority_classes`` lists (default: preemptible and normal; deadline work,
  ``skyrack-high``, preempts other teams' jobs and is given by name); a namespace of no team gets the
  default. The class list travels on the team's Namespace (an annotation the cluster layer writes):
  the policy is fixed code, the environment file only data.

Both run on every pod created or updated outside the namespaces that hold the cluster's own services:
``kube-system`` (and Kubernetes' other two), and namespaces labelled ``skyrack.io/cluster-service``
(the cluster layer's; an operator's probe namespace). Namespaces and their labels are cluster-scoped:
only a cluster administrator can make one or move one out of the policies' reach.
"""

from __future__ import annotations

from .. import config
from .. import plan as planmod
from . import objects as o

TOLERATIONS_POLICY = "skyrack-team-tolerations"
PRIORITIES_POLICY = "skyrack-team-priorities"
PRIORITY_CLASSES_ANNOTATION = "skyrack.io/priority-classes"
CLUSTER_SERVICE_LABEL = "skyrack.io/cluster-service"  # value "true": outside the team policies
KUBERNETES_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
ADMISSION_API = "admissionregistration.k8s.io/v1"


def cluster_service_labels() -> dict[str, str]:
    """For a namespace of the cluster layer's own services (balloons, GPU plugin, monitoring)."""
    return {CLUSTER_SERVICE_LABEL: "true"}


def team_namespace_annotations(layer: config.TeamLayer) -> dict[str, str]:
    return {PRIORITY_CLASSES_ANNOTATION: ",".join(layer.priority_classes)}


# CEL: the namespace's team ('' for a namespace of no team).
_TEAM = (f"has(namespaceObject.metadata.labels) && '{planmod.TEAM_LABEL}' in namespaceObject.metadata.labels "
         f"? namespaceObject.metadata.labels['{planmod.TEAM_LABEL}'] : ''")
# A toleration is allowed when it names a key (an empty key with Exists tolerates every taint), and a team
# key only with operator Equal and this namespace's own team as its value.
_TOLERATION_OK = (f"has(t.key) && t.key != '' && (t.key != '{planmod.TEAM_TAINT_KEY}' || "
                  "(variables.team != '' && (!has(t.operator) || t.operator == 'Equal') && "
                  "has(t.value) && t.value == variables.team))")
_ALLOWED = (f"has(namespaceObject.metadata.annotations) && '{PRIORITY_CLASSES_ANNOTATION}' in "
            f"namespaceObject.metadata.annotations ? "
            f"namespaceObject.metadata.annotations['{PRIORITY_CLASSES_ANNOTATION}'].split(',') : "
            f"{list(config.DEFAULT_TEAM_PRIORITY_CLASSES)!r}")


_PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
# A gang's pods are ranked by their PodGroup's priority (skyrack.scheduler): its class is limited like a pod's.
# Every version the API server serves (1.36's v1alpha2, 1.37's v1beta1); none when the gate is off.
_POD_GROUPS = {"apiGroups": ["scheduling.k8s.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
               "resources": ["podgroups"]}


def _policy(name: str, variables: list[dict[str, str]], validation: dict[str, str],
            rules: tuple[dict, ...] = (_PODS,)) -> o.Manifest:
    rules = [dict(r) for r in rules]
    return o.obj(ADMISSION_API, "ValidatingAdmissionPolicy", name, spec={
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": rules},
        "variables": variables,
        "validations": [{"reason": "Forbidden", **validation}],
    })


def _binding(policy: str) -> o.Manifest:
    return o.obj(ADMISSION_API, "ValidatingAdmissionPolicyBinding", policy, spec={
        "policyName": policy,
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(KUBERNETES_NAMESPACES)},
            {"key": CLUSTER_SERVICE_LABEL, "operator": "DoesNotExist"},
        ]}},
    })


def manifests() -> list[o.Manifest]:
    """The same for every environment: what varies (a team, its classes) is on the namespaces."""
    tolerations = _policy(TOLERATIONS_POLICY, [{"name": "team", "expression": _TEAM}], {
        "expression": f"!has(object.spec.tolerations) || object.spec.tolerations.all(t, {_TOLERATION_OK})",
        "messageExpression": (
            "'namespace ' + namespaceObject.metadata.name + ': ' + (variables.team == '' "
            f"? 'no team\\'s namespace may tolerate a team taint ({planmod.TEAM_TAINT_KEY}) or every taint' "
            f": 'a pod may tolerate only its own team\\'s taint, {planmod.TEAM_TAINT_KEY}=' + variables.team + "
            "' with operator Equal, and not every taint')"),
    })
    priorities = _policy(PRIORITIES_POLICY, [{"name": "allowed", "expression": _ALLOWED}], {
        "expression": "!has(object.spec.priorityClassName) || object.spec.priorityClassName == '' || "
                      "object.spec.priorityClassName in variables.allowed",
        "messageExpression": (
            "'namespace ' + namespaceObject.metadata.name + ' may not use priority class ' + "
            "object.spec.priorityClassName + ' (allowed: ' + variables.allowed.join(', ') + "
            "'; cluster.teams.<team>.priority_classes in the environment file)'"),
    }, rules=(_PODS, _POD_GROUPS))
    return [tolerations, _binding(TOLERATIONS_POLICY), priorities, _binding(PRIORITIES_POLICY)]
