"""`#cloud-config` user-data for control-plane machines, one function per role.

The Azure stack passes the result as a VM's custom data; the lab writes the same text
into a systemd-nspawn node's NoCloud seed. Inputs are the plan, the member and
concrete PEM strings (no Pulumi outputs), so both callers share every line.

* `etcd(plan, member, pki)`: an etcd member (role ``etcd`` or ``etcd-events``) run by
  etcd-server from the site's Kubernetes repository under a skyrack unit, with peer and client mutual TLS,
  `--quota-backend-bytes` from the environment and its data on the local disk.
* `apiserver(plan, member, pki, kubernetes_repo=...)`: kubeadm brings up the control
  plane with the shared CAs given here; the first API server runs `kubeadm init`, the
  others join it; events go to the events cluster when there is one.
* `pool_node(plan, pool, join, kubernetes_repo=...)`: a cloud-pool node (scale-set
  instance) that joins as a worker with the bootstrap token.
* `execution_node(plan, node, tls, receptor=..., runner_dir=...)`: an on-prem Receptor
  execution node that dials the controller's Receptor over mutual TLS and runs
  `ansible-runner worker` for the racks it serves (`skyrack join --via receptor`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import yaml

from .. import tuning
from ..config.schema import ExecutionNode
from ..plan import DISRUPTION_EXEMPT_LABEL, ENV_LABEL, POOL_LABEL, Member, Plan, PoolPlan
from ..scheduler import gangs, scheduler_config_yaml
from . import render

if TYPE_CHECKING:
    from ..certs import PlanPki

ETCD_PKI = "/etc/skyrack/etcd/pki"
ETCD_DATA = "/var/lib/etcd"
ETCD_STATE_FILE = "/run/skyrack/etcd-state.env"  # SKYRACK_ETCD_STATE=new|existing, written at each boot
ETCD_MARKER_DIR = "/var/lib/skyrack/etcd"  # on the OS disk: outlives the data directory on local NVMe
CLIENT_PORT = 2379
PEER_PORT = 2380
DataDisk = Literal["local", "rootfs"]
# containerd, kubelet, kubeadm and kubectl come from the site's Kubernetes repository (the bootstrap script)
NODE_PACKAGES = ("curl", "gpg", "iptables", "containernetworking-plugins")  # the last: the pod network's CNI plugins
ETCD_PACKAGES = ("curl", "gpg")
BOOT_LOG = "/var/log/skyrack-boot.log"  # every first-boot script's progress and verdict (retry.sh.j2)


@dataclass(frozen=True)
class EtcdPki:
    ca_cert: str
    server_cert: str
    server_key: str
    peer_cert: str
    peer_key: str

    @classmethod
    def issued(cls, pp: PlanPki, name: str) -> EtcdPki:
        """An etcd member's material from the plan's issued certificates (skyrack.certs)."""
        server, peer = pp.certs[f"{name}-server"], pp.certs[f"{name}-peer"]
        return cls(pp.cas["etcd"].cert_pem, server.cert_pem, server.key_pem, peer.cert_pem, peer.key_pem)


@dataclass(frozen=True)
class ApiServerPki:
    ca_cert: str
    ca_key: str
    front_proxy_ca_cert: str
    front_proxy_ca_key: str
    sa_key: str
    sa_pub: str
    serving_cert: str
    serving_key: str
    etcd_ca_cert: str
    etcd_client_cert: str
    etcd_client_key: str
    bootstrap_token: str
    ca_cert_hash: str

    @classmethod
    def issued(cls, pp: PlanPki, name: str) -> ApiServerPki:
        """An API server's material from the plan's issued certificates (skyrack.certs)."""
        kube, proxy = pp.cas["kubernetes"], pp.cas["front-proxy"]
        serving, client = pp.certs[f"{name}-serving"], pp.certs[f"{name}-etcd-client"]
        return cls(kube.cert_pem, kube.key_pem, proxy.cert_pem, proxy.key_pem, pp.service_account.key_pem,
                   pp.service_account.cert_pem, serving.cert_pem, serving.key_pem, pp.cas["etcd"].cert_pem,
                   client.cert_pem, client.key_pem, pp.bootstrap_token, pp.ca_cert_hash)


@dataclass(frozen=True)
class WorkerJoin:
    """What a worker needs to join: the bootstrap token and the CA hash to trust."""

    bootstrap_token: str
    ca_cert_hash: str


def client_url(member: Member) -> str:
    return f"https://{member.ip}:{CLIENT_PORT}"


def etcd_endpoints(plan: Plan, role: str = "etcd") -> list[str]:
    return [client_url(m) for m in plan.members_of(role)]


def etcd_flags(plan: Plan, member: Member) -> list[str]:
    """The etcd command line of a member: the one place its flags are decided."""
    if member.role not in ("etcd", "etcd-events"):
        raise ValueError(f"{member.name} is an {member.role}, not an etcd member")
    peers = plan.members_of(member.role)
    quota = plan.env.control_plane.etcd.quota_backend_gib * 1024**3
    return [
        f"--name={member.name}",
        f"--data-dir={ETCD_DATA}/{member.role}",
        f"--listen-client-urls={client_url(member)},https://127.0.0.1:{CLIENT_PORT}",
        f"--advertise-client-urls={client_url(member)}",
        f"--listen-peer-urls=https://{member.ip}:{PEER_PORT}",
        f"--initial-advertise-peer-urls=https://{member.ip}:{PEER_PORT}",
        "--initial-cluster=" + ",".join(f"{p.name}=https://{p.ip}:{PEER_PORT}" for p in peers),
        f"--initial-cluster-token=skyrack-{plan.env.name}-{member.role}",
        # `new` or `existing`, decided at each boot by skyrack-etcd-member (systemd expands it from its file).
        "--initial-cluster-state=${SKYRACK_ETCD_STATE}",
        "--client-cert-auth",
        f"--trusted-ca-file={ETCD_PKI}/ca.crt",
        f"--cert-file={ETCD_PKI}/server.crt",
        f"--key-file={ETCD_PKI}/server.key",
        "--peer-client-cert-auth",
        f"--peer-trusted-ca-file={ETCD_PKI}/ca.crt",
        f"--peer-cert-file={ETCD_PKI}/peer.crt",
        f"--peer-key-file={ETCD_PKI}/peer.key",
        f"--quota-backend-bytes={quota}",
        "--snapshot-count=10000",
        "--listen-metrics-urls=http://127.0.0.1:2381",
        "--feature-gates=InitialCorruptCheck=true",
    ]


ETCD_DISK_LABEL = "etcd-data"  # the filesystem label skyrack-etcd-disk writes, and finds its disk by


def etcd(plan: Plan, member: Member, pki: EtcdPki, *, kubernetes_repo: str, data_disk: DataDisk | None = None,
         backup_url: str | None = None) -> str:
    """User-data of an etcd or events-etcd member: etcd (`control_plane.etcd.version`) from the site's
    Kubernetes repository `kubernetes_repo`, run by a skyrack unit.

    `data_disk="local"` puts the data directory on the VM's local NVMe disk (or Azure's
    local temporary disk on sizes without NVMe); `"rootfs"` (the lab) keeps it on the
    machine's own disk. By default the environment decides (a lab environment: rootfs),
    so the Pulumi stack and the lab render the same bytes for the same member.
    `backup_url` (the Azure stack's snapshot container): a timer on the member uploads
    snapshots there with the VM's managed identity (see `etcd_snapshot_script`).
    """
    data_disk = data_disk or ("rootfs" if plan.env.lab is not None else "local")
    unit = render("cloud-init/etcd.service.j2", member=member, flags=etcd_flags(plan, member), data_dir=ETCD_DATA,
                  state_file=ETCD_STATE_FILE, guarded=etcd_guarded(member))
    disk = render("cloud-init/etcd-disk.sh.j2", data_dir=ETCD_DATA, data_disk=data_disk, label=ETCD_DISK_LABEL)
    install = render("cloud-init/etcd-install.sh.j2", version=plan.env.control_plane.etcd.version,
                     repo=kubernetes_repo.rstrip("/") + "/", pki_dir=ETCD_PKI, prerequisites=ETCD_PACKAGES,
                     deadline_minutes=plan.env.control_plane.boot_deadline_minutes, boot_log=BOOT_LOG)
    return render("cloud-init/etcd.yaml.j2", env=plan.env, member=member, pki=pki, pki_dir=ETCD_PKI, etcd_packages=ETCD_PACKAGES,
                  unit=unit, disk_script=disk, install_script=install,
                  member_script=etcd_member_script(plan, member),
                  snapshot_script=etcd_snapshot_script(plan, member, backup_url) if backup_url else None,
                  snapshot_minutes=plan.env.backups.interval_minutes,
                  defrag_script=etcd_defrag_script(plan, member), defrag_at=etcd_defrag_time(plan, member))


DEFRAG_EVERY_MINUTES = 8  # between two members' slots: far more than a defragmentation takes


def etcd_defrag_time(plan: Plan, member: Member) -> tuple[int, int]:
    """(hour, minute) UTC of the member's daily defragmentation: control_plane.etcd.defrag_hour_utc, each
    member of a cluster its own minute."""
    return plan.env.control_plane.etcd.defrag_hour_utc, (member.index * DEFRAG_EVERY_MINUTES) % 60


def etcd_defrag_script(plan: Plan, member: Member) -> str:
    """skyrack-etcd-defrag: the member's daily defragmentation, one member of the cluster at a time."""
    hour, minute = etcd_defrag_time(plan, member)
    return render("cloud-init/etcd-defrag.py.j2", member=member, hour=hour, minute=minute,
                  lock=f"skyrack-defrag-{member.role}", client_port=CLIENT_PORT, pki_dir=ETCD_PKI,
                  cluster_endpoints=",".join(etcd_endpoints(plan, member.role)),
                  quota=plan.env.control_plane.etcd.quota_backend_gib * 1024**3)


def etcd_snapshot_script(plan: Plan, member: Member, container_url: str) -> str:
    """skyrack-etcd-snapshot: the leader's periodic snapshot, uploaded with the VM's managed identity."""
    return render("cloud-init/etcd-snapshot.sh.j2", member=member, env_name=plan.env.name,
                  container_url=container_url.rstrip("/"), interval_minutes=plan.env.backups.interval_minutes,
                  work_dir=f"{ETCD_DATA}/snapshot", pki_dir=ETCD_PKI, client_port=CLIENT_PORT,
                  block_bytes=256 * 1024**2)


def etcd_member_script(plan: Plan, member: Member) -> str:
    """skyrack-etcd-member: at every boot, whether etcd starts as `new` or rejoins as `existing`."""
    others = ",".join(client_url(p) for p in plan.members_of(member.role) if p.name != member.name)
    return render("cloud-init/etcd-member.sh.j2", member=member, data_dir=f"{ETCD_DATA}/{member.role}",
                  state_file=ETCD_STATE_FILE, peer_url=f"https://{member.ip}:{PEER_PORT}", others=others,
                  pki_dir=ETCD_PKI, attempts=3, retry_seconds=2, guarded=etcd_guarded(member),
                  marker=etcd_marker(member), client_port=CLIENT_PORT, env_file=f"configs/{plan.source.name}")


def etcd_guarded(member: Member) -> bool:
    """Whether an emptied member refuses to start a new cluster once its machine has been in one.

    The main cluster holds the whole cluster's state: never replaced by an empty one. The
    events cluster holds events with a one-hour lease: empty, it loses nothing the cluster
    needs, and refusing would only stop the API servers from recording events."""
    return member.role == "etcd"


def etcd_marker(member: Member) -> str:
    """The marker that this machine has been in a quorate cluster: on the OS disk, never the data disk."""
    return f"{ETCD_MARKER_DIR}/{member.role}.cluster"


def events_servers_override(plan: Plan) -> str | None:
    """`--etcd-servers-overrides` value sending core/v1 events to the events cluster, if any."""
    events = etcd_endpoints(plan, "etcd-events")
    return "/events#" + ";".join(events) if events else None


# kubeadm init phases that write cluster-wide objects. The cluster layer (skyrack.kube, pulumi-kubernetes)
# owns the bootstrap token, cluster-info, kubeadm-config, kubelet-config, kube-proxy and CoreDNS, so that
# every API server VM is interchangeable and no object has two owners.
SKIPPED_INIT_PHASES = ("upload-config", "upload-certs", "bootstrap-token", "addon", "show-join-command")
SCHEDULER_CONFIG = "/etc/kubernetes/skyrack-scheduler.yaml"
# skyrack-wan-guard (templates/cloud-init/wan-guard.py.j2) on every API server: its identity, which the cluster
# layer lets get, list and patch Nodes (kube.bootstrap.wan_guard_rbac), and how often it looks.
WAN_GUARD_USER = "skyrack:wan-guard"
WAN_GUARD_EVERY_S = 10
WAN_GUARD_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")  # the controller's NoExecute ones


def apiserver(plan: Plan, member: Member, pki: ApiServerPki, *, kubernetes_repo: str) -> str:
    """User-data of an API server. `kubernetes_repo`: the Kubernetes apt repository for this minor version."""
    if member.role != "apiserver":
        raise ValueError(f"{member.name} is an {member.role}, not an API server")
    # Every API server is the same `kubeadm init` (shared CA and service-account keys), with the
    # phases that write cluster objects skipped: those come from the cluster layer (skyrack.kube).
    ctx = _kubeadm_context(plan, kubernetes_repo, pki, mode="init", node_label=member.name,
                           kubelet_args=[("node-ip", member.ip), ("node-labels", f"{DISRUPTION_EXEMPT_LABEL}=true")],
                           reservation=member.reservation)
    ctx.update(member=member, **_cluster_context(plan), scheduler_config=scheduler_config_yaml(plan.env),
               kubelet_config=yaml.safe_dump(kubelet_configuration(plan), sort_keys=False),
               audit_policy=yaml.safe_dump(tuning.audit_policy(), sort_keys=False),
               skip_phases=",".join(SKIPPED_INIT_PHASES),
               # Behind the load balancer (Azure's, or the lab's stand-in) a member must not reach itself
               # through it: Azure's drops a backend's connection to its own frontend.
               hairpin=True)
    ctx["pod_network"] = apiserver_pod_network(plan, member)
    unit = render("cloud-init/apiserver-hairpin.service.j2", **ctx)
    renew = {"member": member, "certs": plan.env.kubernetes.certificates}
    return render("cloud-init/apiserver.yaml.j2", **_node_files(ctx), hairpin_unit=unit,
                  certs_renew_script=render("cloud-init/kubeadm-certs-renew.sh.j2", **renew),
                  certs_renew_service=render("cloud-init/kubeadm-certs-renew.service.j2", **renew),
                  certs_renew_timer=render("cloud-init/kubeadm-certs-renew.timer.j2", **renew),
                  wan_guard_script=wan_guard_script(member),
                  wan_guard_service=render("cloud-init/wan-guard.service.j2", member=member))


def wan_guard_script(member: Member) -> str:
    """/usr/local/sbin/skyrack-wan-guard of an API server (docs/azure.md "A WAN outage evicts nothing")."""
    return render("cloud-init/wan-guard.py.j2", member=member, exempt_label=DISRUPTION_EXEMPT_LABEL,
                  taint_keys=list(WAN_GUARD_TAINTS), client=WAN_GUARD_USER, every_s=WAN_GUARD_EVERY_S, validity_h=24)


def _cluster_context(plan: Plan) -> dict:
    return {"etcd_endpoints": etcd_endpoints(plan), "events_override": events_servers_override(plan),
            "scheduler_config_path": SCHEDULER_CONFIG, "feature_gates": gangs(plan.env.kubernetes.version).feature_gates,
            "runtime_config": gangs(plan.env.kubernetes.version).runtime_config, "load": plan.tuning,
            "audit_policy_path": tuning.AUDIT_POLICY_PATH, "audit_log_dir": tuning.AUDIT_LOG_DIR}


def cluster_configuration(plan: Plan, endpoint: str | None = None) -> str:
    """kubeadm's ClusterConfiguration exactly as every API server's `kubeadm init` gets it (external etcd,
    the events override, the scheduler): also the cluster layer's kubeadm-config, which `kubeadm join`
    and `kubeadm upgrade` read."""
    return render("cloud-init/kubeadm-cluster.yaml.j2", env=plan.env, **_cluster_context(plan),
                  endpoint=(endpoint or plan.apiserver_endpoint).removeprefix("https://"),
                  kubeadm_api=kubeadm_api(plan))


def kubelet_configuration(plan: Plan) -> dict:
    """The cluster-wide KubeletConfiguration: what `kubeadm init` gives each API server's kubelet and what the
    cluster layer's kubelet-config ConfigMap gives every joining one (racks, pools)."""
    k = plan.env.kubernetes
    out = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
           "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                              "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"}},
           "authorization": {"mode": "Webhook"},
           "cgroupDriver": "systemd",
           "clusterDNS": [plan.node_dns_ip],  # the node's own cache (cluster layer: node-local-dns)
           "clusterDomain": k.cluster_domain,
           "maxPods": plan.max_pods,
           "rotateCertificates": True,
           "serializeImagePulls": False,  # published practice: pull images in parallel
           "staticPodPath": "/etc/kubernetes/manifests"}
    if k.allow_cgroup_v1:  # only a lab on a cgroup v1 host (kubernetes.allow_cgroup_v1)
        out["failCgroupV1"] = False
    return out


def kubeadm_api(plan: Plan) -> str:
    return "v1beta4" if plan.env.kubernetes.minor >= 31 else "v1beta3"


def pool_node(plan: Plan, pool: PoolPlan, join: WorkerJoin, *, kubernetes_repo: str) -> str:
    """User-data of a cloud-pool node: kubeadm joins it as a worker labelled with its pool."""
    labels = {ENV_LABEL: plan.env.name, POOL_LABEL: pool.name, DISRUPTION_EXEMPT_LABEL: "true"}
    ctx = _kubeadm_context(plan, kubernetes_repo, join, mode="worker", node_label=f"a node of pool {pool.name}",
                           kubelet_args=[("node-labels", ",".join(f"{k}={v}" for k, v in labels.items())),
                                         # cloud-node-manager (cluster layer) sets the providerID the autoscaler needs
                                         ("cloud-provider", "external")],
                           reservation=pool.reservation)
    ctx.update(pool=pool, member=None, hairpin=False, pod_network=[])
    return render("cloud-init/pool-node.yaml.j2", **_node_files(ctx))


RECEPTOR_SOCKET = "/run/receptor/receptor.sock"  # an execution node's own control service (RuntimeDirectory)
RECEPTOR_WORK_TYPE = "ansible-runner"  # what join/receptor.py submits
RECEPTOR_TLS_DIR = "/etc/receptor/tls"
RECEPTOR_TLS = "mesh"  # the name of every node's tls-client and tls-server configuration
RECEPTOR_NODE_ID_OID = "1.3.6.1.4.1.2312.19.1"  # a Receptor node ID in a certificate's subjectAltName


@dataclass(frozen=True)
class MeshTls:
    """A Receptor node's mutual TLS: the mesh CA and the node's certificate (its node ID as an other name);
    and the public key its work must be signed with (the controller holds the private one)."""

    ca_cert: str
    cert: str
    key: str
    work_public_key: str


def execution_node(plan: Plan, node: ExecutionNode, tls: MeshTls, *, receptor: str = "/usr/local/bin/receptor",
                   runner_dir: str = "/opt/skyrack/runner/bin") -> str:
    """User-data of an execution node: Receptor dialling `execution.controller` over mutual TLS (the
    controller's certificate must name it, and its own names this node), with a work type that runs
    `ansible-runner worker` (from `runner_dir`, beside the ansible-playbook it runs)."""
    ex = plan.env.execution
    if ex is None or ex.controller is None:
        raise ValueError("an execution node needs the environment's execution.controller")
    files = {"rootcas": f"{RECEPTOR_TLS_DIR}/ca.crt", "cert": f"{RECEPTOR_TLS_DIR}/node.crt",
             "key": f"{RECEPTOR_TLS_DIR}/node.key"}
    config = [
        # work units (their payloads hold the join's bootstrap token) only in memory: /run is a tmpfs
        {"node": {"id": node.name, "datadir": "/run/receptor/data"}},
        {"log-level": "info"},
        {"tls-client": {"name": RECEPTOR_TLS, **files}},
        # work reaches this node's control service over TLS too, from a client of the mesh's CA; the
        # controller checks that this node's certificate names the node it submits to (above the mesh)
        {"tls-server": {"name": RECEPTOR_TLS, "cert": files["cert"], "key": files["key"], "requireclientcert": True,
                        "clientcas": files["rootcas"]}},
        {"control-service": {"service": "control", "filename": RECEPTOR_SOCKET, "tls": RECEPTOR_TLS}},
        {"tcp-peer": {"address": ex.controller, "redial": True, "tls": RECEPTOR_TLS}},
        # only work signed by the controller's work-signing key runs here
        {"work-verification": {"publickey": f"{RECEPTOR_TLS_DIR}/work-signing.pub"}},
        {"work-command": {"worktype": RECEPTOR_WORK_TYPE, "command": f"{runner_dir}/ansible-runner",
                          "params": "worker", "allowruntimeparams": True, "verifysignature": True}},
    ]
    return render("cloud-init/execution-node.yaml.j2", env=plan.env, node=node, controller=ex.controller,
                  receptor=receptor, runner_dir=runner_dir, tls=tls, tls_dir=RECEPTOR_TLS_DIR,
                  receptor_config=yaml.safe_dump(config, sort_keys=False, default_flow_style=False))


# The pod network every kubelet node gets: a bridge, host-local addresses from the node's planned range, the
# routes script and its unit. The racks' pod_network role renders the same templates (templates/node/) with the
# same variable names; these defaults are the role's (ansible/roles/pod_network/defaults/main.yml).
POD_NETWORK_CONF = "/etc/cni/net.d/10-skyrack.conflist"
POD_NETWORK_SCRIPT = "/usr/local/sbin/skyrack-pod-routes"
POD_NETWORK_UNIT = "/etc/systemd/system/skyrack-pod-routes.service"
POD_NETWORK_BRIDGE = "cni0"
POD_NETWORK_MTU = 1500


def pod_network_files(plan: Plan, *, node: str, where: str, pod_cidr: str,
                      peers: Sequence[dict[str, str]] = ()) -> list[tuple[str, str, str]]:
    """(path, mode, text) of a node's pod network: its range, and the other nodes of its L2 segment (`peers`:
    name, ip, pod_cidr) routed directly. What the pod_network role writes on a rack node, byte for byte."""
    ctx = {"pod_network_node": node, "pod_network_where": where, "pod_network_cidr": pod_cidr,
           "pod_network_cluster_cidr": str(plan.env.kubernetes.pod_cidr), "pod_network_peers": list(peers),
           "pod_network_bridge": POD_NETWORK_BRIDGE, "pod_network_mtu": POD_NETWORK_MTU,
           "pod_network_script": POD_NETWORK_SCRIPT}
    return [(POD_NETWORK_CONF, "0644", render("node/pod-network.conflist.j2", **ctx)),
            (POD_NETWORK_SCRIPT, "0755", render("node/pod-routes.sh.j2", **ctx)),
            (POD_NETWORK_UNIT, "0644", render("node/pod-routes.service.j2", **ctx))]


def apiserver_pod_network(plan: Plan, member: Member) -> list[tuple[str, str, str]]:
    """An API server's pod network: its range from the lock and no L2 peers (in Azure the VNet's route table
    brings its range to it; every other range is behind the default gateway)."""
    if member.pod_cidr is None:
        raise ValueError(f"{member.name} has no pod range in the plan")
    return pod_network_files(plan, node=member.name, where=f"{plan.env.name}, an API server",
                             pod_cidr=member.pod_cidr)


CONTAINERD_ROOT = "/var/lib/containerd"
CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins


def containerd_files(plan: Plan) -> tuple[str, dict[str, str]]:
    """containerd's config.toml and, with a registry mirror, one hosts.toml per upstream registry.

    The same templates the container_runtime role renders on rack nodes. Whether containers may
    get a negative oom_score_adj is decided on the machine (the bootstrap script), as the role does."""
    config = render("node/containerd-config.toml.j2", containerd_root=CONTAINERD_ROOT,
                    containerd_sandbox_image=plan.env.cluster.versions.pause, containerd_max_concurrent_downloads=10,
                    containerd_restrict_oom_score_adj=False, containerd_default_runtime="runc",
                    containerd_cni_bin_dir=CNI_BIN_DIR)
    mirror = plan.env.mirrors.registry
    hosts = {r: render("node/containerd-hosts.toml.j2", upstream_registry=r, registry_mirror=mirror,
                       registry_ca=bool(plan.env.mirrors.ca))
             for r in plan.image_registries} if mirror else {}
    return config, hosts


KUBELET_CONFIG_DIR = "/etc/kubernetes/kubelet.conf.d"  # kubelet --config-dir; the racks' role uses the same
KUBELET_DROPIN = "50-skyrack.conf"


def kubelet_dropin(reservation: tuning.Reservation) -> str:
    """A node's own kubelet settings over the cluster's (kubelet --config-dir): its reservations."""
    return yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                           **reservation.kubelet_fields()}, sort_keys=False)


def _kubeadm_context(plan: Plan, kubernetes_repo: str, pki: ApiServerPki | WorkerJoin, *,
                     reservation: tuning.Reservation | None = None, **extra: object) -> dict:
    env = plan.env
    containerd_config, registry_hosts = containerd_files(plan)
    if reservation is not None:  # the VM's size is known: its kubelet reserves for it
        extra["kubelet_args"] = [("config-dir", KUBELET_CONFIG_DIR), *extra["kubelet_args"]]  # type: ignore[misc]
    return {
        "kubelet_dropin": kubelet_dropin(reservation) if reservation else "",
        "kubelet_dropin_path": f"{KUBELET_CONFIG_DIR}/{KUBELET_DROPIN}",
        "containerd_config": containerd_config, "registry_hosts": registry_hosts,
        "env": env, "plan": plan, "pki": pki, "node_packages": NODE_PACKAGES,
        "endpoint": plan.apiserver_endpoint.removeprefix("https://"), "lb_ip": plan.apiserver_lb_ip,
        "kubeadm_api": kubeadm_api(plan),
        "repo": kubernetes_repo.rstrip("/") + "/", "prerequisites": NODE_PACKAGES,
        "deadline_minutes": env.control_plane.boot_deadline_minutes, "boot_log": BOOT_LOG, **extra,
    }


def _node_files(ctx: dict) -> dict:
    """The context plus the kubeadm configuration and bootstrap script every kubeadm node gets."""
    return {**ctx, "kubeadm": render("cloud-init/kubeadm.yaml.j2", **ctx),
            "bootstrap": render("cloud-init/kubeadm-bootstrap.sh.j2", **ctx),
            # the racks' kubelet role installs the same unit
            "node_dns_unit": render("node/node-dns.service.j2", node_dns_ip=ctx["plan"].node_dns_ip)}
