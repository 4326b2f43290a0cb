"""Rendering control-plane user-data from a plan and concrete certificates (what the lab calls too)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from skyrack import certs
from skyrack import plan as planmod
from skyrack.render import cloud_init, yaml_block
from support import need

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
REPO = "file:///srv/kubernetes-debs"


etcd_pki = cloud_init.EtcdPki.issued
apiserver_pki = cloud_init.ApiServerPki.issued


@pytest.fixture(scope="module")
def lab() -> tuple[planmod.Plan, certs.PlanPki]:
    plan = planmod.make(CONFIGS / "lab.yaml")
    return plan, certs.issue_all(plan)


@pytest.mark.parametrize("text", ["one line", "two\nlines\n", "trailing\n\n\n", "  indented first\nsecond\n",
                                  "-----BEGIN X-----\nabc\n-----END X-----\n", "a: b\n# c\n"])
def test_yaml_block_round_trips(text: str) -> None:
    assert yaml.safe_load("key: " + yaml_block(text, 2) + "\n")["key"] == text


def test_lab_etcd_member_user_data(lab) -> None:
    plan, issued = lab
    member = plan.members_of("etcd")[1]
    repo = plan.env.mirrors.kubernetes
    text = cloud_init.etcd(plan, member, etcd_pki(issued, member.name), kubernetes_repo=repo)  # lab: rootfs
    config = yaml.safe_load(text)
    assert text.startswith("#cloud-config\n") and config["hostname"] == member.name
    assert config["apt"]["proxy"] == plan.env.mirrors.apt_proxy
    assert config["packages"] == ["curl", "gpg"]
    files = {f["path"]: f for f in config["write_files"]}
    key = files["/etc/skyrack/etcd/pki/peer.key"]
    assert key["content"] == issued.certs[f"{member.name}-peer"].key_pem
    assert key["permissions"] == "0600" and "owner" not in key  # root's until etcd-server made the etcd user
    # etcd at the environment's version from the site's Kubernetes repository, held, then the PKI handed over
    install = files["/usr/local/sbin/skyrack-etcd-install"]["content"]
    version = plan.env.control_plane.etcd.version
    assert f"{repo}Release.key" in install and f"deb [signed-by=/etc/apt/keyrings/kubernetes.gpg] {repo} /" in install
    assert f"etcd-server='{version}-*' etcd-client='{version}-*'" in install
    assert install.index("apt-mark hold etcd-server etcd-client") < install.index("chown -R etcd:etcd /etc/skyrack/etcd/pki")
    disk = files["/usr/local/sbin/skyrack-etcd-disk"]["content"]
    assert "nvme" not in disk and "chown etcd:etcd" in disk
    unit = files["/etc/systemd/system/skyrack-etcd.service"]["content"]
    flags = cloud_init.etcd_flags(plan, member)
    assert all(f"  {flag}" in unit for flag in flags)
    assert "--quota-backend-bytes=2147483648" in flags  # lab: quota_backend_gib 2
    assert config["runcmd"][0] == ["/usr/local/sbin/skyrack-etcd-install"]  # before the unit starts etcd


def test_events_cluster_is_a_separate_cluster() -> None:
    plan = planmod.make(CONFIGS / "prod.yaml")
    main, events = plan.members_of("etcd")[0], plan.members_of("etcd-events")[0]
    a, b = cloud_init.etcd_flags(plan, main), cloud_init.etcd_flags(plan, events)
    token = lambda flags: next(f for f in flags if f.startswith("--initial-cluster-token="))  # noqa: E731
    cluster = lambda flags: next(f for f in flags if f.startswith("--initial-cluster="))  # noqa: E731
    assert token(a) != token(b)
    assert events.ip not in cluster(a) and main.ip not in cluster(b)
    with pytest.raises(ValueError, match="not an etcd member"):
        cloud_init.etcd_flags(plan, plan.members_of("apiserver")[0])


def test_lab_apiservers_are_behind_the_load_balancer_as_in_azure(lab) -> None:
    """One code path: the lab's endpoint is the load balancer's address (its haproxy stand-in), and each
    member reaches it through its own hairpin rule, as an Azure VM must."""
    plan, issued = lab
    assert plan.apiserver_endpoint == f"https://{plan.apiserver_lb_ip}:6443"
    member = plan.members_of("apiserver")[-1]
    config = yaml.safe_load(cloud_init.apiserver(plan, member, apiserver_pki(issued, member.name),
                                                 kubernetes_repo=REPO))
    paths = {f["path"]: f["content"] for f in config["write_files"]}
    hairpin = paths["/etc/systemd/system/skyrack-apiserver-hairpin.service"]
    assert f"-d {plan.apiserver_lb_ip}/32 -p tcp --dport 6443 -j DNAT --to-destination {member.ip}:6443" in hairpin
    kubeadm = list(yaml.safe_load_all(paths["/etc/skyrack/kubeadm.yaml"]))
    init = next(d for d in kubeadm if d["kind"] == "InitConfiguration")
    assert "bootstrapTokens" not in init, "the cluster layer owns the join token"
    cluster = next(d for d in kubeadm if d["kind"] == "ClusterConfiguration")
    assert cluster["controlPlaneEndpoint"] == plan.apiserver_endpoint.removeprefix("https://")
    assert f"{REPO}/ /" in paths["/usr/local/sbin/skyrack-kubeadm"]


def test_api_servers_get_the_racks_pod_network_on_their_own_range(lab) -> None:
    """An API server is a Node: without a CNI configuration kubelet reports it NotReady and nothing runs there
    (the cluster autoscaler's pod among them). It gets the racks' own pod network, on its range from the lock."""
    plan, issued = lab
    member = plan.members_of("apiserver")[0]
    config = yaml.safe_load(cloud_init.apiserver(plan, member, apiserver_pki(issued, member.name),
                                                 kubernetes_repo=REPO))
    files = {f["path"]: f for f in config["write_files"]}
    cni = json.loads(files[cloud_init.POD_NETWORK_CONF]["content"])
    assert cni["plugins"][0]["ipam"]["ranges"] == [[{"subnet": member.pod_cidr}]]
    assert member.pod_cidr == planmod.read_lock(CONFIGS / "lab.yaml")["apiservers"][member.name]
    routes = files[cloud_init.POD_NETWORK_SCRIPT]
    assert routes["permissions"] == "0755" and "ip route replace" not in routes["content"]  # no L2 peers
    assert f"-s {member.pod_cidr} ! -d {plan.env.kubernetes.pod_cidr} " in routes["content"]
    assert "containernetworking-plugins" in config["packages"]  # bridge, host-local, portmap
    # routes and the egress rule before kubeadm starts kubelet
    runcmd = [" ".join(c) for c in config["runcmd"]]
    assert runcmd.index("systemctl enable --now skyrack-pod-routes.service") < runcmd.index("/usr/local/sbin/skyrack-kubeadm")
    assert [(p, m) for p, m, _ in cloud_init.apiserver_pod_network(plan, member)] == [
        (cloud_init.POD_NETWORK_CONF, "0644"), (cloud_init.POD_NETWORK_SCRIPT, "0755"),
        (cloud_init.POD_NETWORK_UNIT, "0644")]
    etcd = plan.members_of("etcd")[0]
    with pytest.raises(ValueError, match="etcd-0 has no pod range"):
        cloud_init.apiserver_pod_network(plan, etcd)


def test_the_pod_network_paths_are_the_roles(lab) -> None:
    """The racks' pod_network role and the API servers' user-data write the same files to the same places."""
    defaults = yaml.safe_load((CONFIGS.parent / "ansible/roles/pod_network/defaults/main.yml").read_text())
    assert defaults["pod_network_conf"] == cloud_init.POD_NETWORK_CONF
    assert defaults["pod_network_script"] == cloud_init.POD_NETWORK_SCRIPT
    assert defaults["pod_network_bridge"] == cloud_init.POD_NETWORK_BRIDGE
    assert defaults["pod_network_mtu"] == cloud_init.POD_NETWORK_MTU
    tasks = (CONFIGS.parent / "ansible/roles/pod_network/tasks/main.yml").read_text()
    assert f"dest: {cloud_init.POD_NETWORK_UNIT}\n" in tasks


def test_api_servers_renew_kubeadms_certificates_before_they_expire(tmp_path) -> None:
    """The environment's certificate lifetimes reach kubeadm (its validity, the controller manager's signing
    duration for kubelets) and the renewal timer (how often, how far ahead), on every API server."""
    data = yaml.safe_load((CONFIGS / "lab.yaml").read_text())
    data["kubernetes"]["certificates"] = {"validity_minutes": 600, "renew_before_minutes": 100}
    env = tmp_path / "lab.yaml"
    env.write_text(yaml.safe_dump(data))
    (tmp_path / "lab.lock.yaml").write_text((CONFIGS / "lab.lock.yaml").read_text())
    plan = planmod.make(env)
    member = plan.members_of("apiserver")[0]
    config = yaml.safe_load(cloud_init.apiserver(plan, member, apiserver_pki(certs.issue_all(plan), member.name),
                                                 kubernetes_repo=REPO))
    paths = {f["path"]: f["content"] for f in config["write_files"]}
    cluster = next(d for d in yaml.safe_load_all(paths["/etc/skyrack/kubeadm.yaml"])
                   if d["kind"] == "ClusterConfiguration")
    assert cluster["certificateValidityPeriod"] == "600m0s"
    assert {"name": "cluster-signing-duration", "value": "600m0s"} in cluster["controllerManager"]["extraArgs"]
    timer = paths["/etc/systemd/system/skyrack-certs-renew.timer"]
    assert "OnUnitInactiveSec=1200s" in timer  # a fifth of the 100-minute window
    script = paths["/usr/local/sbin/skyrack-certs-renew"]
    assert "renew_before=6000\n" in script and "kubeadm certs renew all --config" in script
    # one static pod at a time, in the order the API server comes first
    order = [script.index(f"restart {c} ") for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")]
    assert order == sorted(order)
    # enabled by the bootstrap on every boot, before its done-marker exit
    boot = paths["/usr/local/sbin/skyrack-kubeadm"]
    assert boot.index("systemctl enable --now skyrack-certs-renew.timer") < boot.index('[ -f "$done_marker" ] && exit 0')
    # production: kubeadm's year, renewed a month ahead, checked twice a day
    assert planmod.make(CONFIGS / "prod.yaml").env.kubernetes.certificates.check_every_s == 12 * 3600


def _wan_guard(lab, tmp_path: Path):
    """The guard as an API server gets it, loaded as a module (its main loop is not started)."""
    import importlib.util

    plan, issued = lab
    member = plan.members_of("apiserver")[0]
    config = yaml.safe_load(cloud_init.apiserver(plan, member, apiserver_pki(issued, member.name),
                                                 kubernetes_repo=REPO))
    paths = {f["path"]: f for f in config["write_files"]}
    assert paths["/usr/local/sbin/skyrack-wan-guard"]["permissions"] == "0755"
    assert "ExecStart=/usr/local/sbin/skyrack-wan-guard" in paths["/etc/systemd/system/skyrack-wan-guard.service"][
        "content"]
    boot = paths["/usr/local/sbin/skyrack-kubeadm"]["content"]
    assert boot.index("skyrack-wan-guard.service") < boot.index('[ -f "$done_marker" ] && exit 0')  # every boot
    script = tmp_path / "skyrack_wan_guard.py"
    script.write_text(paths["/usr/local/sbin/skyrack-wan-guard"]["content"])
    spec = importlib.util.spec_from_file_location("skyrack_wan_guard", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _node(name: str, ready: bool, taints: list[tuple[str, str]], exempt: bool = False, version: str = "7") -> dict:
    labels = {planmod.DISRUPTION_EXEMPT_LABEL: "true"} if exempt else {planmod.RACK_LABEL: "r01"}
    return {"metadata": {"name": name, "labels": labels, "resourceVersion": version},
            "spec": {"taints": [{"key": k, "effect": e} for k, e in taints]},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}]}}


UNREACHABLE = "node.kubernetes.io/unreachable"


def test_the_wan_guard_clears_the_controllers_taint_only_when_every_rack_node_is_down(lab, tmp_path) -> None:
    """upstream's master disruption mode leaves a taint it added in the same pass (kubernetes#111385): the
    guard removes the controller's NoExecute taints when every counted Node is NotReady, and never else."""
    guard = _wan_guard(lab, tmp_path)
    team = (planmod.TEAM_TAINT_KEY, "NoSchedule")
    racks = [_node("r01-n01", False, [team, (UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")]),
             _node("r01-n02", False, [team, (UNREACHABLE, "NoSchedule")]),
             _node("r02-n01", False, [("node.kubernetes.io/not-ready", "NoExecute"), ("gpu-broken", "NoExecute")])]
    apiserver = _node("apiserver-0", True, [(UNREACHABLE, "NoExecute")], exempt=True)  # a cloud Node: not counted
    got = {name: (version, [(t["key"], t["effect"]) for t in keep])
           for name, version, keep in guard.to_clear([apiserver, *racks])}
    assert got == {"r01-n01": ("7", [team, (UNREACHABLE, "NoSchedule")]),  # NoSchedule stays: nothing new lands
                   "r02-n01": ("7", [("gpu-broken", "NoExecute")])}  # only the controller's are the guard's
    # one rack node still answers: a node or rack failure, upstream's to evict as it documents
    assert guard.to_clear([apiserver, *racks[:2], {**racks[2], "status": {"conditions": [
        {"type": "Ready", "status": "True"}]}}]) == []
    assert guard.to_clear([apiserver]) == []  # no rack node at all: nothing to decide

    calls = []
    guard.credentials = lambda: None
    guard.kubectl = lambda *args: calls.append(args) or (json.dumps({"items": [apiserver, *racks]})
                                                          if args[0] == "get" else "")
    assert guard.once() == ["r01-n01", "r02-n01"]
    patch = json.loads(calls[1][-1])
    # only the Node as it was read: a changed Node fails the test and is looked at again next round
    assert calls[1][:4] == ("patch", "node", "r01-n01", "--type=json")
    assert patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}


def test_user_data_fits_azure_custom_data() -> None:
    from skyrack.azure.vm import CUSTOM_DATA_LIMIT, custom_data

    plan = planmod.make(CONFIGS / "prod.yaml")
    issued = certs.issue_all(plan)
    member = plan.members_of("apiserver")[-1]
    text = cloud_init.apiserver(plan, member, apiserver_pki(issued, member.name), kubernetes_repo=REPO)
    # room to grow by two thirds before Azure refuses it (half was the margin until the audit policy and the
    # kubelet's reservations came, at 33.7 kB); past this, compress it (cloud-init reads gzipped user-data)
    assert len(text.encode()) < CUSTOM_DATA_LIMIT * 0.6
    assert CUSTOM_DATA_LIMIT == 65535  # the VM API's limit on the decoded custom data, not 64 KiB
    assert base64.b64decode(custom_data("x" * 65535)) == b"x" * 65535
    with pytest.raises(ValueError, match="is 65536 bytes; Azure accepts at most 65535"):
        custom_data("x" * 65536)


def _scripts(config: dict) -> dict[str, str]:
    return {f["path"]: f["content"] for f in config["write_files"] if f["content"].startswith("#!/bin/sh")}


def test_rendered_shell_scripts_pass_shellcheck(lab) -> None:
    """Boot scripts fail at 3 a.m. on a machine nobody can reach: lint every one skyrack renders."""
    if shutil.which("shellcheck") is None:
        need("shellcheck is not installed (scripts/apt-packages.txt)")
    plan, issued = lab
    prod = planmod.make(CONFIGS / "prod.yaml")
    prod_pki = certs.issue_all(prod)
    configs = [
        cloud_init.etcd(plan, plan.members_of("etcd")[0], etcd_pki(issued, "etcd-0"), kubernetes_repo=REPO),
        cloud_init.etcd(prod, prod.members_of("etcd")[0], etcd_pki(prod_pki, "etcd-0"), kubernetes_repo=REPO,
                        backup_url="https://prodetcdbak.blob.core.windows.net/etcd-snapshots"),
        *(cloud_init.apiserver(prod, m, apiserver_pki(prod_pki, m.name), kubernetes_repo=REPO)
          for m in prod.members_of("apiserver")[:2]),
        cloud_init.pool_node(prod, prod.pools[0], cloud_init.WorkerJoin(prod_pki.bootstrap_token,
                                                                        prod_pki.ca_cert_hash), kubernetes_repo=REPO),
    ]
    checked = 0
    for text in configs:
        for path, script in _scripts(yaml.safe_load(text)).items():
            run = subprocess.run(["shellcheck", "--shell=sh", "-"], input=script, capture_output=True, text=True)
            assert run.returncode == 0, f"{path}:\n{run.stdout}"
            checked += 1
    # etcd: install, disk and member scripts (lab, prod), prod's snapshot; API servers' bootstrap and
    # certificate renewal and pod routes (the racks' too); the pool node
    assert checked == 14


def test_every_kubeadm_vm_gets_its_dns_cache_address_before_kubelet_starts(lab) -> None:
    """API servers and pool nodes run pods too (node-local-dns on each): the same unit the racks' kubelet
    role installs, enabled before the kubeadm bootstrap starts kubelet with clusterDNS on that address."""
    plan, issued = lab
    member = plan.members_of("apiserver")[0]
    prod = planmod.make(CONFIGS / "prod.yaml")
    texts = {"apiserver": (plan, cloud_init.apiserver(plan, member, apiserver_pki(issued, member.name),
                                                     kubernetes_repo=REPO)),
             "pool": (prod, cloud_init.pool_node(prod, prod.pools[0], cloud_init.WorkerJoin("abcdef.0123456789abcdef",
                                                                                          "sha256:00"),
                                                 kubernetes_repo=REPO))}
    role = (Path(__file__).resolve().parents[2] / "ansible/roles/kubelet/tasks/main.yml").read_text()
    assert 'src: "{{ kubelet_node_templates_dir }}/node-dns.service.j2"' in role
    for what, (p, text) in texts.items():
        config = yaml.safe_load(text)
        unit = {f["path"]: f["content"] for f in config["write_files"]}["/etc/systemd/system/skyrack-node-dns.service"]
        assert f"ExecStart=ip -4 address add {p.node_dns_ip}/32 dev lo label lo:skyrack-dns" in unit, what
        assert "Before=kubelet.service" in unit, what
        steps = config["runcmd"]
        assert steps.index(["systemctl", "enable", "--now", "skyrack-node-dns.service"]) < \
            steps.index(["/usr/local/sbin/skyrack-kubeadm"]), what
