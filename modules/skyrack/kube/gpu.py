"""GPU nodes: the NVIDIA device plugin, the DCGM exporter, and a health check that taints bad nodes.

All three run only on nodes with a GPU product label (set by the rack join from the plan) and
tolerate the GPU and team taints those nodes carry. They assume the rack join made the NVIDIA
container runtime containerd's default on GPU nodes (so ``nvidia-smi`` is injected).

A pod gets the GPUs the device plugin allocated to it, and no others: the plugin hands them over as
volume mounts (``DEVICE_LIST_STRATEGY=volume-mounts``), and the nvidia role sets the container toolkit
to accept only those from an unprivileged container (``accept-nvidia-visible-devices-envvar-when-
unprivileged = false``), so ``NVIDIA_VISIBLE_DEVICES=all`` in a pod's environment (or its image's,
as CUDA images set it) widens nothing. The health probe and the DCGM exporter must see every GPU of
the node: they run privileged, in a namespace no team can use (team namespaces enforce Pod Security
``baseline``, which refuses privileged containers).

The health check runs ``nvidia-smi`` every ``cluster.gpu_health.interval_seconds``; when it
fails, sees fewer GPUs than the node's GPU-count label, or finds uncorrected ECC errors, it
taints the node ``skyrack.io/gpu-unhealthy=<reason>:NoSchedule`` (new pods stay away, running
jobs are left to finish or fail); when the node is healthy again it removes the taint.
"""

from __future__ import annotations

from .. import plan as planmod
from . import isolation
from . import labels as lb
from . import objects as o

NAMESPACE = "skyrack-gpu"
UNHEALTHY = lb.Taint("skyrack.io/gpu-unhealthy", "", "NoSchedule")
KUBELET = "/var/lib/kubelet"
# the device plugin's way of telling the runtime which GPUs a container was allocated: mounts under
# /var/run/nvidia-container-devices, which a pod cannot forge (an environment variable it can)
DEVICE_LIST = "volume-mounts"
# the toolkit honours NVIDIA_VISIBLE_DEVICES=all only from a privileged container (see above)
SEES_EVERY_GPU = {"privileged": True}

PROBE = """#!/bin/sh
# Writes one line to $STATUS/result every $INTERVAL seconds: "<ok|reason> <gpus seen>".
STATUS=${STATUS:-/status}
while true; do
  if out=$(nvidia-smi --query-gpu=index,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits 2>&1)
  then
    seen=$(printf '%s\\n' "$out" | grep -c .)
    ecc=$(printf '%s\\n' "$out" | awk -F', *' '$2 ~ /^[0-9]+$/ && $2 > 0 {n++} END {print n+0}')
    if [ "$ecc" -gt 0 ]; then state=ecc-errors; else state=ok; fi
  else
    seen=0; state=nvidia-smi-failed
    echo "nvidia-smi failed: $out" >&2
  fi
  echo "$state $seen" > "$STATUS/result.tmp" && mv "$STATUS/result.tmp" "$STATUS/result"
  [ -n "$ONCE" ] && break
  sleep "$INTERVAL"
done
"""

TAINTER = """#!/bin/sh
# Reads the probe's verdict and sets or clears the node's {key} taint.
STATUS=${{STATUS:-/status}}
while true; do
  [ -n "$ONCE" ] || sleep "$INTERVAL"
  if [ ! -r "$STATUS/result" ]; then [ -n "$ONCE" ] && break; continue; fi
  read -r state seen < "$STATUS/result"
  want=$(kubectl get node "$NODE_NAME" -o jsonpath='{{.metadata.labels.{count_label}}}')
  if [ "$state" = ok ] && [ -n "$want" ] && [ "$seen" -lt "$want" ]; then state=gpu-missing; fi
  if [ "$state" = ok ]; then
    kubectl taint node "$NODE_NAME" {key}:{effect}- 2>/dev/null && echo "healthy: taint removed"
  else
    echo "unhealthy: $state ($seen of ${{want:-?}} GPUs)"
    kubectl taint node "$NODE_NAME" "{key}=$state:{effect}" --overwrite
  fi
  [ -n "$ONCE" ] && break
done
"""


def _gpu_pod(containers: list[dict], **fields: object) -> dict:
    return {"priorityClassName": "system-node-critical", "affinity": lb.gpu_node_affinity(),
            "tolerations": [lb.GPU_TAINT.toleration_any_value(), lb.TEAM_TAINT.toleration_any_value(),
                            UNHEALTHY.toleration_any_value(), {"key": "CriticalAddonsOnly", "operator": "Exists"}],
            "containers": containers, **fields}


def _host(name: str, path: str) -> dict:
    return {"name": name, "hostPath": {"path": path}}


def device_plugin(image: str) -> o.Manifest:
    labels = {"app.kubernetes.io/name": "nvidia-device-plugin"}
    c = o.container("nvidia-device-plugin", image, env=[{"name": "FAIL_ON_INIT_ERROR", "value": "false"},
                                                        {"name": "DEVICE_LIST_STRATEGY", "value": DEVICE_LIST}],
                    securityContext={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    volumeMounts=[{"name": "device-plugin", "mountPath": f"{KUBELET}/device-plugins"}])
    return o.workload("DaemonSet", "nvidia-device-plugin", NAMESPACE,
                      _gpu_pod([c], volumes=[_host("device-plugin", f"{KUBELET}/device-plugins")]), labels=labels)


def dcgm_exporter(image: str) -> o.Manifest:
    labels = {"app.kubernetes.io/name": "dcgm-exporter"}
    c = o.container("dcgm-exporter", image, env=[{"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"}],
                    ports=[{"name": "metrics", "containerPort": 9400}],
                    requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "512Mi"},
                    securityContext=SEES_EVERY_GPU,
                    volumeMounts=[{"name": "pod-resources", "mountPath": f"{KUBELET}/pod-resources",
                                   "readOnly": True}])
    pod = _gpu_pod([c], volumes=[_host("pod-resources", f"{KUBELET}/pod-resources")])
    pod["priorityClassName"] = "system-cluster-critical"
    return o.workload("DaemonSet", "dcgm-exporter", NAMESPACE, pod, labels=labels,
                      pod_annotations=o.scrape(9400))


def health_check_scripts() -> dict[str, str]:
    count_label = planmod.GPU_COUNT_LABEL.replace(".", "\\.")
    return {"probe.sh": PROBE,
            "tainter.sh": TAINTER.format(key=UNHEALTHY.key, effect=UNHEALTHY.effect, count_label=count_label)}


def health_check(p: planmod.Plan) -> list[o.Manifest]:
    v = p.env.cluster.versions
    name, labels = "gpu-health", {"app.kubernetes.io/name": "gpu-health"}
    interval = [{"name": "INTERVAL", "value": str(p.env.cluster.gpu_health.interval_seconds)}]
    node = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    status = {"name": "status", "mountPath": "/status"}
    scripts = {"name": "scripts", "mountPath": "/scripts", "readOnly": True}
    pod = _gpu_pod(
        [o.container("probe", v.gpu_health_check, command=["/bin/sh", "/scripts/probe.sh"],
                     env=[*interval, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                          {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}],
                     requests={"cpu": "10m", "memory": "32Mi"}, volumeMounts=[status, scripts],
                     securityContext=SEES_EVERY_GPU),
         o.container("tainter", v.kubectl, command=["/bin/sh", "/scripts/tainter.sh"], env=[*interval, node],
                     requests={"cpu": "10m", "memory": "32Mi"}, volumeMounts=[status, scripts])],
        serviceAccountName=name,
        volumes=[{"name": "status", "emptyDir": {}}, {"name": "scripts", "configMap": {"name": name}}])
    return [
        o.service_account(name, NAMESPACE),
        o.cluster_role(f"skyrack:{name}", [o.rule([""], ["nodes"], ["get", "patch", "update"])]),
        o.binding(f"skyrack:{name}", "ClusterRole", f"skyrack:{name}",
                  [o.subject("ServiceAccount", name, NAMESPACE)]),
        o.obj("v1", "ConfigMap", name, NAMESPACE, data=health_check_scripts()),
        o.workload("DaemonSet", name, NAMESPACE, pod, labels=labels),
    ]


def manifests(p: planmod.Plan) -> list[o.Manifest]:
    v = p.env.cluster.versions
    return [o.obj("v1", "Namespace", NAMESPACE, labels=isolation.cluster_service_labels()), device_plugin(v.nvidia_device_plugin),
            dcgm_exporter(v.dcgm_exporter), *health_check(p)]
