"""Just enough of the scheduler's placement rules to ask "could this pod land on this node?":
taints against tolerations, nodeSelector and required node affinity against node labels."""

from __future__ import annotations

from typing import Any


def parse_taint(text: str) -> tuple[str, str, str]:
    kv, _, effect = text.rpartition(":")
    key, _, value = kv.partition("=")
    return key, value, effect


def tolerates(pod: dict[str, Any], taint: str) -> bool:
    key, value, effect = parse_taint(taint)
    for t in pod.get("tolerations", []):
        if t.get("effect") not in (None, "", effect):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, key):
            return True
        if t.get("operator", "Equal") == "Equal" and t.get("key") == key and t.get("value", "") == value:
            return True
    return False


def _expr(e: dict[str, Any], labels: dict[str, str]) -> bool:
    op, key = e["operator"], e["key"]
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op == "In":
        return labels.get(key) in e["values"]
    if op == "NotIn":
        return labels.get(key) not in e["values"]
    raise AssertionError(f"operator {op} not modelled")


def selects(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in pod.get("nodeSelector", {}).items()):
        return False
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required:
        return any(all(_expr(e, labels) for e in term.get("matchExpressions", []))
                   for term in required["nodeSelectorTerms"])
    return True


def can_run_on(pod: dict[str, Any], labels: dict[str, str], taints: list[str]) -> bool:
    no_schedule = [t for t in taints if parse_taint(t)[2] in ("NoSchedule", "NoExecute")]
    return selects(pod, labels) and all(tolerates(pod, t) for t in no_schedule)


def pod_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["template"]["spec"]


def live_labels(node: Any) -> dict[str, str]:
    """A plan node's labels as the API server shows them: the plan's plus those every kubelet sets."""
    return {**node.labels, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": node.name}
