"""Prometheus: scrapes the API servers, every node's kubelet and cAdvisor, and annotated pods.

Annotated pods include the DCGM exporter (GPU metrics) and CoreDNS. The API servers live
outside the cluster but are found as the endpoints of the ``default/kubernetes`` service.
Kubelets are scraped through the API server's node proxy, with TLS verified against the
cluster CA (kubelet serving certificates are self-signed); see docs/kube.md for the trade-off
at thousands of nodes. Storage is an emptyDir: a restart loses history (no storage class is
assumed); retention is ``cluster.prometheus_retention_days``.
"""

from __future__ import annotations

from typing import Any

import yaml

from .. import plan as planmod
from . import isolation
from . import labels as lb
from . import objects as o

NAMESPACE = "skyrack-monitoring"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
_AUTH = {"scheme": "https", "tls_config": {"ca_file": f"{SA_DIR}/ca.crt"},
         "authorization": {"credentials_file": f"{SA_DIR}/token"}}


def _via_node_proxy(job: str, suffix: str) -> dict[str, Any]:
    return {"job_name": job, **_AUTH, "kubernetes_sd_configs": [{"role": "node"}], "relabel_configs": [
        {"action": "labelmap", "regex": "__meta_kubernetes_node_label_(.+)"},
        {"target_label": "__address__", "replacement": "kubernetes.default.svc:443"},
        {"source_labels": ["__meta_kubernetes_node_name"], "regex": "(.+)",
         "target_label": "__metrics_path__", "replacement": f"/api/v1/nodes/$1/proxy{suffix}"}]}


def prometheus_config(interval_seconds: int = 30) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": f"{interval_seconds}s", "evaluation_interval": f"{interval_seconds}s"},
        "scrape_configs": [
            {"job_name": "kubernetes-apiservers", **_AUTH, "kubernetes_sd_configs": [{"role": "endpoints"}],
             "relabel_configs": [{"action": "keep", "regex": "default;kubernetes;https", "source_labels": [
                 "__meta_kubernetes_namespace", "__meta_kubernetes_service_name",
                 "__meta_kubernetes_endpoint_port_name"]}]},
            _via_node_proxy("kubernetes-nodes", "/metrics"),
            _via_node_proxy("kubernetes-cadvisor", "/metrics/cadvisor"),
            {"job_name": "kubernetes-pods", "kubernetes_sd_configs": [{"role": "pod"}], "relabel_configs": [
                {"action": "keep", "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                 "regex": "true"},
                {"source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_path"], "regex": "(.+)",
                 "target_label": "__metrics_path__"},
                {"source_labels": ["__meta_kubernetes_pod_ip", "__meta_kubernetes_pod_annotation_prometheus_io_port"],
                 "regex": "(.+);(\\d+)", "replacement": "$1:$2", "target_label": "__address__"},
                {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
                {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}]},
        ],
    }


def manifests(p: planmod.Plan) -> list[o.Manifest]:
    name, labels = "prometheus", {"app.kubernetes.io/name": "prometheus"}
    retention = f"{p.env.cluster.prometheus_retention_days}d"
    c = o.container("prometheus", p.env.cluster.versions.prometheus,
                    args=["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus",
                          f"--storage.tsdb.retention.time={retention}", "--web.enable-lifecycle"],
                    ports=[{"name": "web", "containerPort": 9090}],
                    requests={"cpu": "1", "memory": "4Gi"}, limits={"memory": "16Gi"},
                    readinessProbe={"httpGet": {"path": "/-/ready", "port": 9090}},
                    securityContext={"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
                    volumeMounts=[{"name": "config", "mountPath": "/etc/prometheus", "readOnly": True},
                                  {"name": "data", "mountPath": "/prometheus"}])
    pod = {"serviceAccountName": name, "priorityClassName": "system-cluster-critical",
           "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "fsGroup": 65534},
           "tolerations": lb.system_tolerations(), "affinity": lb.prefer_non_gpu(), "containers": [c],
           "volumes": [{"name": "config", "configMap": {"name": name}}, {"name": "data", "emptyDir": {}}]}
    return [
        o.obj("v1", "Namespace", NAMESPACE, labels=isolation.cluster_service_labels()),
        o.service_account(name, NAMESPACE),
        o.cluster_role(f"skyrack:{name}", [
            o.rule([""], ["nodes", "nodes/proxy", "nodes/metrics", "services", "endpoints", "pods"],
                   ["get", "list", "watch"]),
            o.rule(["discovery.k8s.io"], ["endpointslices"], ["get", "list", "watch"]),
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
        o.binding(f"skyrack:{name}", "ClusterRole", f"skyrack:{name}", [o.subject("ServiceAccount", name, NAMESPACE)]),
        o.obj("v1", "ConfigMap", name, NAMESPACE,
              data={"prometheus.yml": yaml.safe_dump(prometheus_config(), sort_keys=False)}),
        o.workload("Deployment", name, NAMESPACE, pod, labels=labels, replicas=1),
        o.obj("v1", "Service", name, NAMESPACE, labels=labels,
              spec={"selector": labels, "ports": [{"name": "web", "port": 9090, "targetPort": 9090}]}),
    ]
