"""What ``kubeadm init`` would create and ``kubeadm join`` relies on, for API servers built without it.

An on-prem node joins with ``kubeadm join`` (token discovery). That needs, in the cluster:
the ``cluster-info`` ConfigMap in kube-public (a kubeconfig with the CA and endpoint; the
controller manager's ``bootstrapsigner`` adds the token's JWS signature to it); a bootstrap-token
Secret; RBAC that lets the token's group read cluster-info, kubeadm-config and kubelet-config,
request a client certificate and have it approved; the ``kubeadm-config`` and ``kubelet-config``
ConfigMaps; kube-proxy and CoreDNS. Object names follow kubeadm's, so kubeadm finds them.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import re
from typing import Any

import yaml

from .. import plan as planmod
from ..render import cloud_init
from . import objects as o

TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"  # noqa: S105 - a group name
NODES_GROUP = "system:nodes"
APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"  # the CN of kubeadm's apiserver-kubelet-client certificate
# the addons' objects, by kubeadm's names (skyrack.kube.health asks for them by these)
KUBE_PROXY = "kube-proxy"
COREDNS = "coredns"
DNS_SERVICE = "kube-dns"
KUBE_SYSTEM, KUBE_PUBLIC = "kube-system", "kube-public"


def split_token(token: str) -> tuple[str, str]:
    """'abcdef.0123456789abcdef' -> (id, secret); the format kubeadm and the API server accept."""
    m = TOKEN_RE.match(token)
    if not m:
        raise ValueError("bootstrap_token is not of the form [a-z0-9]{6}.[a-z0-9]{16}")
    return m.group(1), m.group(2)


def token_expiration(now: dt.datetime, ttl_hours: int) -> str:
    """now + ttl, rounded up to the next midnight UTC (RFC 3339).

    Rounding keeps the expiration the same for a day, so a preview does not show a change on
    every run; each `pulumi up` on a new day re-arms the token.
    """
    end = now.astimezone(dt.UTC) + dt.timedelta(hours=ttl_hours)
    midnight = end.replace(hour=0, minute=0, second=0, microsecond=0)
    if midnight < end:
        midnight += dt.timedelta(days=1)
    return midnight.strftime("%Y-%m-%dT%H:%M:%SZ")


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def cluster_info_kubeconfig(endpoint: str, ca_pem: str) -> str:
    """The kubeconfig kubeadm's token discovery reads from cluster-info (one cluster, no user)."""
    ca_b64 = base64.b64encode(ca_pem.encode()).decode()
    return _yaml({"apiVersion": "v1", "kind": "Config",
                  "clusters": [{"name": "", "cluster": {"certificate-authority-data": ca_b64, "server": endpoint}}],
                  "contexts": [], "current-context": "", "preferences": {}, "users": []})


def kube_proxy_kubeconfig(endpoint: str) -> str:
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    return _yaml({"apiVersion": "v1", "kind": "Config",
                  "clusters": [{"name": "default", "cluster": {"certificate-authority": f"{sa}/ca.crt",
                                                                "server": endpoint}}],
                  "contexts": [{"name": "default", "context": {"cluster": "default", "namespace": "default",
                                                               "user": "default"}}],
                  "current-context": "default",
                  "users": [{"name": "default", "user": {"tokenFile": f"{sa}/token"}}]})


def cluster_configuration(p: planmod.Plan, endpoint: str) -> str:
    """kubeadm's ClusterConfiguration, which `kubeadm join` and `kubeadm upgrade` read from kubeadm-config:
    the API servers' own (render.cloud_init), so an upgrade keeps external etcd and the scheduler settings."""
    return cloud_init.cluster_configuration(p, endpoint)


def kubelet_configuration(p: planmod.Plan) -> dict[str, Any]:
    """The cluster-wide KubeletConfiguration every joining kubelet downloads (kubelet-config): the same one
    the API servers' `kubeadm init` gets (render.cloud_init)."""
    return cloud_init.kubelet_configuration(p)


def token_secret(token_id: Any, token_secret_part: Any, expiration: str) -> o.Manifest:
    """The bootstrap-token Secret. ``token_secret_part`` should be a Pulumi secret."""
    m = o.obj("v1", "Secret", o.lift(lambda i: f"bootstrap-token-{i}", token_id), KUBE_SYSTEM,
              type="bootstrap.kubernetes.io/token",
              stringData={"description": "skyrack: joins on-prem nodes (kubeadm token discovery)",
                          "token-id": token_id, "token-secret": token_secret_part,
                          "expiration": expiration,
                          "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
                          "auth-extra-groups": TOKEN_GROUP})
    m["_pulumi_name"] = "bootstrap-token"
    return m


def _get_configmap_role(name: str, configmap: str, namespace: str, subjects: list[dict[str, str]]) -> list[o.Manifest]:
    return [o.role(name, namespace, [o.rule([""], ["configmaps"], ["get"], [configmap])]),
            o.binding(name, "Role", name, subjects, namespace)]


def _groups(*names: str) -> list[dict[str, str]]:
    return [o.subject("Group", n) for n in names]


def join_rbac() -> list[o.Manifest]:
    """kubeadm's bootstrap RBAC, under kubeadm's names."""
    g = o.subject("Group", TOKEN_GROUP)
    return [
        o.binding("kubeadm:kubelet-bootstrap", "ClusterRole", "system:node-bootstrapper", [g]),
        o.binding("kubeadm:node-autoapprove-bootstrap", "ClusterRole",
                  "system:certificates.k8s.io:certificatesigningrequests:nodeclient", [g]),
        o.binding("kubeadm:node-autoapprove-certificate-rotation", "ClusterRole",
                  "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                  [o.subject("Group", NODES_GROUP)]),
        o.cluster_role("kubeadm:get-nodes", [o.rule([""], ["nodes"], ["get"])]),
        o.binding("kubeadm:get-nodes", "ClusterRole", "kubeadm:get-nodes", [g]),
        *_get_configmap_role("kubeadm:bootstrap-signer-clusterinfo", "cluster-info", KUBE_PUBLIC,
                             [o.subject("User", "system:anonymous")]),
        *_get_configmap_role("kubeadm:nodes-kubeadm-config", "kubeadm-config", KUBE_SYSTEM,
                             _groups(TOKEN_GROUP, NODES_GROUP)),
        *_get_configmap_role("kubeadm:kubelet-config", "kubelet-config", KUBE_SYSTEM,
                             _groups(TOKEN_GROUP, NODES_GROUP)),
        # The API server's client certificate for kubelets (kubeadm's apiserver-kubelet-client) is in no group:
        # kubeadm's bootstrap-token phase (skipped on skyrack's API servers) binds it to the kubelet API, without
        # which kubelets refuse the API server's exec, logs, attach and port-forward.
        o.binding("kubeadm:apiserver-kubelet-client", "ClusterRole", "system:kubelet-api-admin",
                  [o.subject("User", APISERVER_KUBELET_CLIENT)]),
    ]


def wan_guard_rbac() -> list[o.Manifest]:
    """What skyrack-wan-guard on each API server may do (render.cloud_init.wan_guard_script): read Nodes, and
    patch them to remove the NoExecute taint the node-lifecycle controller left during a WAN outage."""
    name = cloud_init.WAN_GUARD_USER
    return [o.cluster_role(name, [o.rule([""], ["nodes"], ["get", "list", "patch"])]),
            o.binding(name, "ClusterRole", name, [o.subject("User", name)])]


def kube_proxy(p: planmod.Plan, endpoint: Any) -> list[o.Manifest]:
    k = p.env.kubernetes
    conf = {"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf"},
            "clusterCIDR": str(k.pod_cidr), "mode": "iptables",
            # nf_conntrack_max is a host-wide kernel setting: the OS baseline sets it (os_baseline_sysctls),
            # so kube-proxy does not fight it (and need not write it from a container)
            "conntrack": {"maxPerCore": 0}}
    labels = {"k8s-app": "kube-proxy"}
    pod = {"hostNetwork": True, "priorityClassName": "system-node-critical", "serviceAccountName": "kube-proxy",
           "nodeSelector": {"kubernetes.io/os": "linux"}, "tolerations": [{"operator": "Exists"}],
           "containers": [o.container(
               "kube-proxy", f"registry.k8s.io/kube-proxy:v{k.version}",
               command=["/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf",
                        "--hostname-override=$(NODE_NAME)"],
               env=[{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
               securityContext={"privileged": True},
               volumeMounts=[{"name": "kube-proxy", "mountPath": "/var/lib/kube-proxy"},
                             {"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
                             {"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": True}])],
           "volumes": [{"name": "kube-proxy", "configMap": {"name": "kube-proxy"}},
                       {"name": "xtables-lock", "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}},
                       {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}}]}
    return [
        o.service_account("kube-proxy", KUBE_SYSTEM),
        o.binding("kubeadm:node-proxier", "ClusterRole", "system:node-proxier",
                  [o.subject("ServiceAccount", "kube-proxy", KUBE_SYSTEM)]),
        *_get_configmap_role("kube-proxy", "kube-proxy", KUBE_SYSTEM, _groups(TOKEN_GROUP)),
        o.obj("v1", "ConfigMap", "kube-proxy", KUBE_SYSTEM, labels=labels,
              data={"config.conf": _yaml(conf), "kubeconfig.conf": o.lift(kube_proxy_kubeconfig, endpoint)}),
        o.workload("DaemonSet", KUBE_PROXY, KUBE_SYSTEM, pod, labels=labels),
    ]


COREFILE = """.:53 {{
    errors
    health {{
       lameduck 5s
    }}
    ready
    kubernetes {domain} in-addr.arpa ip6.arpa {{
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }}
    prometheus :9153
    forward . /etc/resolv.conf {{
       max_concurrent 1000
    }}
    cache 30
    loop
    reload
    loadbalance
}}
"""


def coredns_replicas(p: planmod.Plan) -> int:
    """Two for small clusters, then one per 512 nodes (on-prem plus cloud pools at max)."""
    return max(2, math.ceil(p.env.node_count / 512))


def coredns_spread(p: planmod.Plan, labels: dict[str, str]) -> list[dict[str, Any]]:
    """Hard spread: never two replicas more in one zone (each rack is its own zone on-prem) or on one node
    than elsewhere. Honor: a node whose taints CoreDNS does not tolerate (a control-plane node, a NotReady
    one) is not a place to spread to, so it cannot hold the others back. minDomains: while fewer racks
    (nodes) than the plan has for the replicas are Ready, as when the first rack has joined and the others
    not yet, a replica waits Pending instead of doubling up where it would stay (nothing moves a running
    pod when nodes arrive later). matchLabelKeys: a rollout's new pods spread among themselves; counting the
    old ones would let the new set end up in one rack once the old pods are gone."""
    racks = len(p.env.racks) or 1
    domains = {planmod.ZONE_LABEL: min(coredns_replicas(p), racks),
               "kubernetes.io/hostname": min(coredns_replicas(p), max(1, len(p.nodes)))}
    return [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
             **({"minDomains": n} if n > 1 else {}),
             "labelSelector": {"matchLabels": labels}, "matchLabelKeys": ["pod-template-hash"],
             "nodeTaintsPolicy": "Honor", "nodeAffinityPolicy": "Honor"}
            for key, n in domains.items()]


def coredns_affinity(p: planmod.Plan) -> dict[str, Any]:
    """On-prem racks only, when the plan has any: on-prem nodes make most of the lookups, and a replica in
    Azure would answer them across the VPN (and not at all while it is down). Cloud-pool nodes reach
    the on-prem replicas through their own node's cache (node_dns). Non-GPU nodes preferred."""
    from . import labels as lb

    affinity = lb.prefer_non_gpu()
    if p.env.racks:
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": planmod.RACK_LABEL, "operator": "Exists"}]}]}
    return affinity


def coredns(p: planmod.Plan, image: str) -> list[o.Manifest]:
    from . import labels as lb

    k = p.env.kubernetes
    labels = {"k8s-app": "kube-dns"}
    port = {"containerPort": 53, "name": "dns", "protocol": "UDP"}
    pod = {"priorityClassName": "system-cluster-critical", "serviceAccountName": "coredns",
           # the node's resolvers, not the cluster's own DNS: with ClusterFirst CoreDNS would forward
           # to itself, and its loop plugin stops it
           "dnsPolicy": "Default",
           "nodeSelector": {"kubernetes.io/os": "linux"},
           "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}, *lb.system_tolerations()],
           "affinity": coredns_affinity(p),
           "topologySpreadConstraints": coredns_spread(p, labels),
           "containers": [o.container(
               "coredns", image, args=["-conf", "/etc/coredns/Corefile"],
               requests={"cpu": "100m", "memory": "70Mi"}, limits={"memory": "170Mi"},
               ports=[port, {**port, "name": "dns-tcp", "protocol": "TCP"},
                      {"containerPort": 9153, "name": "metrics", "protocol": "TCP"}],
               volumeMounts=[{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
               livenessProbe={"httpGet": {"path": "/health", "port": 8080}, "initialDelaySeconds": 60},
               readinessProbe={"httpGet": {"path": "/ready", "port": 8181}},
               securityContext={"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}})],
           "volumes": [{"name": "config-volume", "configMap": {"name": "coredns"}}]}
    svc_port = {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53}
    return [
        o.service_account("coredns", KUBE_SYSTEM),
        o.cluster_role("system:coredns", [
            o.rule([""], ["endpoints", "services", "pods", "namespaces"], ["list", "watch"]),
            o.rule(["discovery.k8s.io"], ["endpointslices"], ["list", "watch"])]),
        o.binding("system:coredns", "ClusterRole", "system:coredns",
                  [o.subject("ServiceAccount", "coredns", KUBE_SYSTEM)]),
        o.obj("v1", "ConfigMap", "coredns", KUBE_SYSTEM, data={"Corefile": COREFILE.format(domain=k.cluster_domain)}),
        o.workload("Deployment", COREDNS, KUBE_SYSTEM, pod, labels=labels, replicas=coredns_replicas(p),
                   pod_annotations=o.scrape(9153)),
        # the autoscaler's scale-down and node drains never take all of DNS at once
        o.obj("policy/v1", "PodDisruptionBudget", "coredns", KUBE_SYSTEM, labels=labels,
              spec={"maxUnavailable": 1, "selector": {"matchLabels": labels}}),
        o.obj("v1", "Service", DNS_SERVICE, KUBE_SYSTEM, labels=labels,
              spec={"clusterIP": p.dns_service_ip, "selector": labels,
                    "ports": [svc_port, {**svc_port, "name": "dns-tcp", "protocol": "TCP"},
                              {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}]}),
    ]


NODE_DNS = "node-local-dns"
# upstream NodeLocal DNSCache's ports: health on the cache's own address (kubelet probes it on the node),
# metrics on every address of the node (Prometheus scrapes the pod's, i.e. the node's, IP)
NODE_DNS_HEALTH_PORT, NODE_DNS_METRICS_PORT = 8080, 9253
# The node's cache, upstream NodeLocal DNSCache's Corefile with CoreDNS itself as the cache (k8s.io/dns, its
# own binary, is not on the module proxy). The cluster's names go to kube-dns over TCP (no conntrack race on
# UDP); everything else to the node's own resolvers, as CoreDNS does. serve_stale: while kube-dns cannot be
# reached (a rack cut off), a name the node resolved before is still answered, for up to an hour.
NODE_DNS_COREFILE = """{zones} {{
    errors
    cache {{
        success 9984 30
        denial 9984 5
        serve_stale 1h
    }}
    reload
    loop
    bind {ip}
    forward . {upstream} {{
        force_tcp
    }}
    prometheus :{metrics}
    health {ip}:{health}
}}
.:53 {{
    errors
    cache 30 {{
        serve_stale 1h
    }}
    reload
    loop
    bind {ip}
    forward . /etc/resolv.conf
    prometheus :{metrics}
}}
"""


def node_dns_corefile(p: planmod.Plan) -> str:
    zones = " ".join(f"{z}:53" for z in (p.env.kubernetes.cluster_domain, "in-addr.arpa", "ip6.arpa"))
    return NODE_DNS_COREFILE.format(zones=zones, ip=p.node_dns_ip, upstream=p.dns_service_ip,
                                    metrics=NODE_DNS_METRICS_PORT, health=NODE_DNS_HEALTH_PORT)


def node_dns(p: planmod.Plan, image: str) -> list[o.Manifest]:
    """A DNS cache on every node, answering on the node's link-local address (kubernetes.node_dns_ip, put on
    the loopback by the kubelet role and the VMs' user-data), which kubelet gives every pod as its resolver.
    Lookups stay on the node; a node whose link to kube-dns is lost keeps answering from its cache."""
    labels = {"k8s-app": NODE_DNS}
    ip = p.node_dns_ip
    port = {"containerPort": 53, "name": "dns", "protocol": "UDP"}
    pod = {"priorityClassName": "system-node-critical", "hostNetwork": True, "dnsPolicy": "Default",
           "automountServiceAccountToken": False,  # it asks kube-dns, never the API server
           "nodeSelector": {"kubernetes.io/os": "linux"},
           "tolerations": [{"operator": "Exists"}],  # every node: its pods resolve through it
           "containers": [o.container(
               "node-cache", image, args=["-conf", "/etc/coredns/Corefile"],
               requests={"cpu": "25m", "memory": "5Mi"}, limits={"memory": "100Mi"},
               ports=[port, {**port, "name": "dns-tcp", "protocol": "TCP"},
                      {"containerPort": NODE_DNS_METRICS_PORT, "name": "metrics", "protocol": "TCP"}],
               volumeMounts=[{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
               livenessProbe={"httpGet": {"host": ip, "path": "/health", "port": NODE_DNS_HEALTH_PORT},
                              "initialDelaySeconds": 60, "timeoutSeconds": 5},
               securityContext={"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}})],
           "volumes": [{"name": "config-volume", "configMap": {"name": NODE_DNS}}]}
    ds = o.workload("DaemonSet", NODE_DNS, KUBE_SYSTEM, pod, labels=labels, pod_annotations=o.scrape(NODE_DNS_METRICS_PORT))
    # a new Corefile reaches every node by its `reload` plugin; one node's cache at a time on an image change
    ds["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    return [o.obj("v1", "ConfigMap", NODE_DNS, KUBE_SYSTEM, labels=labels, data={"Corefile": node_dns_corefile(p)}),
            ds]


def manifests(p: planmod.Plan, *, endpoint: Any, ca_cert_pem: Any, token_id: Any, token_secret_part: Any,
              now: dt.datetime) -> list[o.Manifest]:
    """Every object an on-prem node's `kubeadm join` needs from the cluster.

    All but kubeadm-config are marked for server-side-apply with force: should a control plane
    have run `kubeadm init` after all, it created them under the same names and this layer takes
    over the fields it sets instead of failing on a conflict. kubeadm-config is not forced: a
    kubeadm-made one also carries the control plane's own settings (external etcd), which must
    not be overwritten; a conflict there stops `pulumi up` with a message instead.
    """
    cluster = p.env.cluster
    out = [
        o.obj("v1", "ConfigMap", "cluster-info", KUBE_PUBLIC,
              data={"kubeconfig": o.lift(cluster_info_kubeconfig, endpoint, ca_cert_pem)}),
        token_secret(token_id, token_secret_part, token_expiration(now, cluster.bootstrap_token_ttl_hours)),
        o.obj("v1", "ConfigMap", "kubeadm-config", KUBE_SYSTEM,
              data={"ClusterConfiguration": o.lift(lambda e: cluster_configuration(p, e), endpoint)}),
        o.obj("v1", "ConfigMap", "kubelet-config", KUBE_SYSTEM, data={"kubelet": _yaml(kubelet_configuration(p))}),
        *join_rbac(),
        *wan_guard_rbac(),
        *kube_proxy(p, endpoint),
        *coredns(p, cluster.versions.coredns),
        *node_dns(p, cluster.versions.coredns),
    ]
    for m in out:
        if m["metadata"]["name"] != "kubeadm-config":
            m["metadata"]["annotations"] = {**m["metadata"].get("annotations", {}), **o.PATCH_FORCE}
    return out
