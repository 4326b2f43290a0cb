"""The Pulumi program under mocks: what it registers for dev and prod, and with which properties."""

from __future__ import annotations

import base64
import functools
import ipaddress
import re
from collections import Counter
from pathlib import Path

import nsg_eval as nsg
import yaml
from pulumi_harness import MOCK_BGP_ADDRESS, SUBSCRIPTION, Registered, StackRun

from skyrack import pki
from skyrack import plan as planmod
from support import is_secret

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CONTRACT = ("apiserver_endpoint", "ca_cert_pem", "ca_cert_hash", "bootstrap_token", "admin_kubeconfig",
            "etcd_endpoints", "vpn_gateway_ip", "backup_container_url", "key_vault_uri")


def plan_of(run: StackRun) -> planmod.Plan:
    return _plan(run.name)


@functools.cache
def _plan(name: str) -> planmod.Plan:
    return planmod.make(CONFIGS / f"{name}.yaml")


def vms(run: StackRun, role: str) -> list[Registered]:
    return [r for r in run.of_type("compute:VirtualMachine") if r.name.rsplit("-", 1)[0] == role]


def user_data(vm: Registered) -> dict:
    text = base64.b64decode(vm.plain["osProfile"]["customData"]).decode()
    assert text.startswith("#cloud-config\n")
    return yaml.safe_load(text)


def file_in(cloud_config: dict, path: str) -> str:
    return next(f["content"] for f in cloud_config["write_files"] if f["path"] == path)


# ----------------------------------------------------------------------------- what is registered


EXPECTED = {  # env: (apiservers, etcd, events etcd, scale sets, NSGs)
    "dev": (3, 3, 0, 1, 3),
    "prod": (5, 5, 5, 2, 4),
}


def test_resource_counts(stack: StackRun) -> None:
    api, etcd, events, pools, nsgs = EXPECTED[stack.name]
    assert len(vms(stack, "apiserver")) == api
    assert len(vms(stack, "etcd")) == etcd
    assert len(vms(stack, "etcd-events")) == events
    assert len(stack.of_type("compute:VirtualMachineScaleSet")) == pools
    assert len(stack.of_type("network:NetworkSecurityGroup")) == nsgs
    kinds = Counter(r.typ for r in stack.resources)
    for single in ("network:VirtualNetwork", "network:LoadBalancer", "network:VirtualNetworkGateway",
                   "network:LocalNetworkGateway", "network:VirtualNetworkGatewayConnection", "keyvault:Vault",
                   "storage:StorageAccount", "storage:BlobContainer", "privatedns:PrivateZone", "network:NatGateway"):
        assert kinds[f"azure-native:{single}"] == 1, single
    # A few dozen Azure resources however many on-prem nodes (prod has 7,680): none per node.
    assert len(stack.resources) < 200


def test_members_spread_over_zones(stack: StackRun) -> None:
    zones = plan_of(stack).env.azure.zones
    for role in ("apiserver", "etcd", "etcd-events"):
        placed = Counter(vm.plain["zones"][0] for vm in vms(stack, role))
        if not placed:
            continue
        assert set(placed) <= set(zones)
        # No two members in one zone while a zone is free; beyond that, as even as it gets.
        assert max(placed.values()) - min(placed.values()) <= 1, (role, placed)
        assert len(placed) == min(len(zones), sum(placed.values())), (role, placed)


def test_vm_sizes_from_the_plan(stack: StackRun) -> None:
    p = plan_of(stack)
    for m in p.members:
        vm = stack.one("compute:VirtualMachine", m.name)
        assert vm.plain["hardwareProfile"]["vmSize"] == m.vm_size
        nic = stack.one("network:NetworkInterface", f"{m.name}-nic")
        assert nic.plain["ipConfigurations"][0]["privateIPAddress"] == m.ip
    # etcd runs on local-NVMe sizes (Lsv3): the published ~200 us fsync.
    assert all(vm.plain["hardwareProfile"]["vmSize"].startswith("Standard_L") for vm in vms(stack, "etcd"))


def test_prod_has_five_of_each_over_three_zones(prod: StackRun) -> None:
    for role in ("apiserver", "etcd", "etcd-events"):
        assert len(vms(prod, role)) == 5
        assert {vm.plain["zones"][0] for vm in vms(prod, role)} == {"1", "2", "3"}


# ----------------------------------------------------------------------------- network security


def subnets(run: StackRun) -> dict[str, dict]:
    vnet = run.one("network:VirtualNetwork", "vnet").plain
    return {s["name"]: s for s in vnet["subnets"]}


def reaches(run: StackRun, src: str, dst: str, port: int) -> bool:
    """Would Azure let a TCP connection from src reach dst:port (dst in one of the VNet's subnets)?"""
    vnet = run.one("network:VirtualNetwork", "vnet").plain
    onprem = run.one("network:LocalNetworkGateway", "onprem-gateway").plain
    tag = nsg.Network(vnet["addressSpace"]["addressPrefixes"]
                      + onprem["localNetworkAddressSpace"]["addressPrefixes"])
    subnet = next(s for s in subnets(run).values()
                  if ipaddress.ip_address(dst) in ipaddress.ip_network(s["addressPrefix"]))
    nsg_id = subnet["networkSecurityGroup"]["id"]
    group = next(r for r in run.of_type("network:NetworkSecurityGroup") if r.state["id"] == nsg_id)
    return nsg.allows(group.plain["securityRules"], tag, src, dst, port)


def sample(cidr: str) -> list[str]:
    net = ipaddress.ip_network(cidr)
    first, middle, last = 1, net.num_addresses // 2, net.num_addresses - 2
    return [str(net.network_address + i) for i in (first, middle, last)]


def test_etcd_is_not_reachable_from_onprem(stack: StackRun) -> None:
    p = plan_of(stack)
    sources = [ip for c in p.env.onprem.cidrs for ip in sample(str(c))]
    sources += [ip for r in p.onprem_pod_ranges for ip in sample(r)]
    sources += [n.ip for n in p.nodes[:3]]
    etcd = [m for m in p.members if m.role.startswith("etcd")]
    for src in sources:
        for m in etcd:
            for port in (2379, 2380, 22):
                assert not reaches(stack, src, m.ip, port), f"{src} reaches {m.name}:{port}"


def test_etcd_ports_only_from_apiservers_and_own_cluster(stack: StackRun) -> None:
    p = plan_of(stack)
    api = p.members_of("apiserver")[0]
    for role in ("etcd", "etcd-events"):
        members = p.members_of(role)
        if not members:
            continue
        a, b = members[0], members[1]
        assert reaches(stack, api.ip, a.ip, 2379)
        assert not reaches(stack, api.ip, a.ip, 2380)
        assert reaches(stack, b.ip, a.ip, 2379) and reaches(stack, b.ip, a.ip, 2380)
        for pool in p.pools:
            assert not reaches(stack, sample(pool.pod_cidr)[0], a.ip, 2379)
        for admin in [*p.env.azure.admin_cidrs, *p.env.azure.operator_networks]:
            assert not reaches(stack, sample(str(admin))[0], a.ip, 2379)
    if p.members_of("etcd-events"):
        main, events = p.members_of("etcd")[0], p.members_of("etcd-events")[0]
        assert not reaches(stack, main.ip, events.ip, 2380)
        assert not reaches(stack, events.ip, main.ip, 2380)
        assert not reaches(stack, events.ip, main.ip, 2379)


def test_apiserver_port_only_from_allowed_sources(stack: StackRun) -> None:
    p = plan_of(stack)
    api = p.members_of("apiserver")
    allowed = [sample(str(c))[1] for c in p.env.onprem.cidrs] + [sample(r)[0] for r in p.onprem_pod_ranges]
    allowed += [sample(pool.pod_cidr)[2] for pool in p.pools] + [api[1].ip, nsg.AZURE_LB_PROBE]
    allowed += [sample(str(c))[0] for c in p.env.azure.operator_networks]
    for src in allowed:
        assert reaches(stack, src, p.apiserver_lb_ip, 6443), src
        assert reaches(stack, src, api[0].ip, 6443), src
    # Public admin ranges open the Key Vault and Storage firewalls, not the (internal) API server.
    public = [sample(str(c))[0] for c in p.env.azure.public_admin_networks]
    for src in ("8.8.8.8", p.members_of("etcd")[0].ip, *public):
        assert not reaches(stack, src, api[0].ip, 6443), src
    # Nothing but 6443: not even SSH from the admins' networks.
    for src in allowed:
        assert not reaches(stack, src, api[0].ip, 22)
        assert not reaches(stack, src, api[0].ip, 10250)


def test_gateway_subnet_has_the_required_name_and_no_nsg(stack: StackRun) -> None:
    gateway = subnets(stack)["GatewaySubnet"]
    assert gateway["addressPrefix"] == plan_of(stack).subnets["GatewaySubnet"]
    assert "networkSecurityGroup" not in gateway
    vpn = stack.one("network:VirtualNetworkGateway", "vpn-gateway").plain
    assert vpn["ipConfigurations"][0]["subnet"]["id"].endswith("/subnets/GatewaySubnet")


# ----------------------------------------------------------------------------- hybrid link


def test_vpn_routes_onprem_nodes_and_pods(stack: StackRun) -> None:
    p = plan_of(stack)
    local = stack.one("network:LocalNetworkGateway", "onprem-gateway").plain
    assert local["gatewayIpAddress"] == str(p.env.onprem.vpn.peer_ip)
    prefixes = local["localNetworkAddressSpace"]["addressPrefixes"]
    assert prefixes == [str(c) for c in p.env.onprem.cidrs] + p.onprem_pod_ranges + [f"{p.env.onprem.vpn.bgp_peer_ip}/32"]
    assert stack.outputs["onprem_routed_prefixes"] == prefixes
    covered = [ipaddress.ip_network(x) for x in local["localNetworkAddressSpace"]["addressPrefixes"]]
    for node in p.nodes:
        assert any(ipaddress.ip_network(node.pod_cidr).subnet_of(c) for c in covered), node.name
    connection = stack.one("network:VirtualNetworkGatewayConnection", "onprem-connection")
    assert is_secret(connection.inputs["sharedKey"])
    gateway_id = connection.plain["virtualNetworkGateway1"]["id"]
    assert gateway_id.endswith(f"/VirtualNetworkGateway/skyrack-{p.env.name}-vpn")


def test_bgp_when_an_asn_is_set(stack: StackRun) -> None:
    vpn = plan_of(stack).env.onprem.vpn
    local = stack.one("network:LocalNetworkGateway", "onprem-gateway").plain
    gateway = stack.one("network:VirtualNetworkGateway", "vpn-gateway").plain
    connection = stack.one("network:VirtualNetworkGatewayConnection", "onprem-connection").plain
    assert vpn.asn is not None  # both shipped environments peer over BGP
    assert gateway["enableBgp"] and connection["enableBgp"]
    assert local["bgpSettings"]["asn"] == vpn.asn
    assert local["bgpSettings"]["bgpPeeringAddress"] == str(vpn.bgp_peer_ip)
    assert vpn.bgp_peer_ip.is_private and vpn.bgp_peer_ip != vpn.peer_ip
    # Azure peers with the device's private address only if that /32 is routed to the tunnel.
    assert f"{vpn.bgp_peer_ip}/32" in local["localNetworkAddressSpace"]["addressPrefixes"]
    # The device needs Azure's own BGP address: exported.
    assert stack.outputs["vpn_bgp_peering_address"] == MOCK_BGP_ADDRESS


# ----------------------------------------------------------------------------- cloud pools


def test_pod_ranges_on_scale_set_nics_equal_the_plan(stack: StackRun) -> None:
    p = plan_of(stack)
    vnet = stack.one("network:VirtualNetwork", "vnet").plain
    assert vnet["addressSpace"]["addressPrefixes"] == p.vnet_address_space
    by_name = subnets(stack)
    for pool in p.pools:
        scale_set = stack.one("compute:VirtualMachineScaleSet", f"pool-{pool.name}").plain
        nic = scale_set["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"][0]
        configs = nic["ipConfigurations"]
        pods = [c for c in configs if not c["primary"]]
        assert len(pods) == pool.max_pods
        subnet_names = {c["subnet"]["id"].rsplit("/subnets/", 1)[1] for c in configs}
        assert len(subnet_names) == 1
        subnet = by_name[subnet_names.pop()]
        assert subnet["addressPrefix"] == pool.pod_cidr
        # Room for every node at max: its own address and its pods', plus Azure's 5 reserved.
        size = ipaddress.ip_network(pool.pod_cidr).num_addresses
        assert pool.max * (1 + pool.max_pods) + 5 <= size
        assert scale_set["sku"] == {"name": pool.vm_size, "tier": "Standard", "capacity": pool.min}
        assert scale_set["tags"]["min"] == str(pool.min) and scale_set["tags"]["max"] == str(pool.max)


def test_each_api_servers_pod_range_is_routed_to_it(stack: StackRun) -> None:
    """An API server's pods (DaemonSets', the autoscaler's) are on its range from the lock: the VNet's route table
    sends the range to its VM from the gateway (on-prem pods), the API servers and the pools; its NIC forwards."""
    p = plan_of(stack)
    apis = p.members_of("apiserver")
    table = stack.one("network:RouteTable", "pod-routes")
    routes = {r["addressPrefix"]: r for r in table.plain["routes"]}
    assert {cidr: (r["nextHopType"], r["nextHopIpAddress"]) for cidr, r in routes.items()} == {
        m.pod_cidr: ("VirtualAppliance", m.ip) for m in apis}
    assert table.plain.get("disableBgpRoutePropagation") is False  # the gateway's subnet keeps on-prem's routes
    attached = {name for name, sub in subnets(stack).items()
                if sub.get("routeTable", {}).get("id") == table.state["id"]}
    assert attached == {"GatewaySubnet", "apiservers", *(f"pool-{x.name}" for x in p.pools)}
    for m in p.members:
        nic = stack.one("network:NetworkInterface", f"{m.name}-nic").plain
        assert nic.get("enableIPForwarding", False) is (m.role == "apiserver"), m.name
    # the NSG: pod to pod from every pod range, nothing new to the API servers' own addresses
    vnet = stack.one("network:VirtualNetwork", "vnet").plain
    onprem = stack.one("network:LocalNetworkGateway", "onprem-gateway").plain
    tag = nsg.Network(vnet["addressSpace"]["addressPrefixes"] + onprem["localNetworkAddressSpace"]["addressPrefixes"])
    group = next(r for r in stack.of_type("network:NetworkSecurityGroup")
                 if r.state["id"] == subnets(stack)["apiservers"]["networkSecurityGroup"]["id"])
    rules = group.plain["securityRules"]
    pod = sample(apis[0].pod_cidr)[1]
    for src in (sample(p.onprem_pod_ranges[0])[0], *(sample(x.pod_cidr)[2] for x in p.pools), sample(apis[1].pod_cidr)[0]):
        assert nsg.allows(rules, tag, src, pod, 8080), src
        assert not nsg.allows(rules, tag, src, apis[0].ip, 8080), src
    for src in (sample(str(p.env.onprem.cidrs[0]))[1], p.members_of("etcd")[0].ip, "8.8.8.8"):
        assert not nsg.allows(rules, tag, src, pod, 8080), src


# ----------------------------------------------------------------------------- API servers and DNS


def test_internal_standard_load_balancer_with_probe(stack: StackRun) -> None:
    p = plan_of(stack)
    lb = stack.one("network:LoadBalancer", "apiserver-lb").plain
    assert lb["sku"]["name"] == "Standard"
    frontend = lb["frontendIPConfigurations"][0]
    assert frontend["privateIPAddress"] == p.apiserver_lb_ip and "publicIPAddress" not in frontend
    probe = lb["probes"][0]
    assert (probe["protocol"], probe["port"], probe["requestPath"]) == ("Https", 6443, "/readyz")
    rule = lb["loadBalancingRules"][0]
    assert rule["probe"]["id"].endswith(f"/loadBalancers/skyrack-{p.env.name}-apiserver/probes/{probe['name']}")
    assert rule["probe"]["id"].startswith(f"/subscriptions/{SUBSCRIPTION}/")
    pool_id = rule["backendAddressPool"]["id"]
    for m in p.members:
        nic = stack.one("network:NetworkInterface", f"{m.name}-nic").plain["ipConfigurations"][0]
        in_pool = [x["id"] for x in nic.get("loadBalancerBackendAddressPools", [])] == [pool_id]
        assert in_pool == (m.role == "apiserver"), m.name


def test_private_dns_names_members(stack: StackRun) -> None:
    p = plan_of(stack)
    zone = stack.one("privatedns:PrivateZone", "dns-zone").plain
    assert zone["privateZoneName"] == p.env.dns_zone
    records = {r.plain["relativeRecordSetName"]: r.plain["aRecords"][0]["ipv4Address"]
               for r in stack.of_type("privatedns:PrivateRecordSet")}
    assert records == {**{m.name: m.ip for m in p.members}, "api": p.apiserver_lb_ip}


# ----------------------------------------------------------------------------- cloud-init on the VMs


def test_etcd_vms_boot_with_mutual_tls_quota_and_local_disk(stack: StackRun) -> None:
    p = plan_of(stack)
    for role in ("etcd", "etcd-events"):
        members = p.members_of(role)
        for m in members:
            config = user_data(stack.one("compute:VirtualMachine", m.name))
            unit = file_in(config, "/etc/systemd/system/skyrack-etcd.service")
            flags = [line.strip().rstrip(" \\") for line in unit.split("ExecStart=/usr/bin/etcd \\\n")[1].splitlines()
                     if line.startswith("  --")]
            assert f"--name={m.name}" in flags
            for flag in ("--client-cert-auth", "--peer-client-cert-auth",
                         f"--quota-backend-bytes={p.env.control_plane.etcd.quota_backend_gib * 2**30}"):
                assert flag in flags
            cluster = next(f for f in flags if f.startswith("--initial-cluster="))
            assert cluster == "--initial-cluster=" + ",".join(f"{x.name}=https://{x.ip}:2380" for x in members)
            assert all(f.startswith("https://") for f in
                       next(f for f in flags if f.startswith("--listen-client-urls=")).split("=", 1)[1].split(","))
            assert "--data-dir=/var/lib/etcd/" + role in flags
            assert "local NVMe" in file_in(config, "/usr/local/sbin/skyrack-etcd-disk")
            # etcd from the stack's Kubernetes repository, installed before the unit starts
            install = file_in(config, "/usr/local/sbin/skyrack-etcd-install")
            assert f"etcd-server='{p.env.control_plane.etcd.version}-*'" in install
            assert config["runcmd"][0] == ["/usr/local/sbin/skyrack-etcd-install"]


def test_apiservers_send_events_to_the_events_cluster(stack: StackRun) -> None:
    p = plan_of(stack)
    first = user_data(stack.one("compute:VirtualMachine", "apiserver-0"))
    docs = list(yaml.safe_load_all(file_in(first, "/etc/skyrack/kubeadm.yaml")))
    cluster = next(d for d in docs if d["kind"] == "ClusterConfiguration")
    assert cluster["etcd"]["external"]["endpoints"] == stack.outputs["etcd_endpoints"]
    args = {a["name"]: a["value"] for a in cluster.get("apiServer", {}).get("extraArgs", [])}
    events = p.members_of("etcd-events")
    if events:
        assert args["etcd-servers-overrides"] == "/events#" + ";".join(f"https://{m.ip}:2379" for m in events)
    else:
        assert "etcd-servers-overrides" not in args
    assert cluster["controlPlaneEndpoint"] == stack.outputs["apiserver_endpoint"].removeprefix("https://")



def test_every_apiserver_is_the_same_init_and_leaves_cluster_objects_to_the_cluster_layer(stack: StackRun) -> None:
    """No "first" API server: any one can be replaced alone. kubeadm writes no cluster-wide object
    (token, cluster-info, kubeadm-config, addons) that skyrack.kube also owns."""
    scripts, kinds = set(), set()
    for vm in stack.of_type("compute:VirtualMachine"):
        if not vm.name.startswith("apiserver-"):
            continue
        data = user_data(vm)
        docs = list(yaml.safe_load_all(file_in(data, "/etc/skyrack/kubeadm.yaml")))
        kinds.add(tuple(sorted(d["kind"] for d in docs)))
        init = next(d for d in docs if d["kind"] == "InitConfiguration")
        assert "bootstrapTokens" not in init
        script = file_in(data, "/usr/local/sbin/skyrack-kubeadm")
        scripts.add("--skip-phases=upload-config,upload-certs,bootstrap-token,addon" in script)
        cluster = next(d for d in docs if d["kind"] == "ClusterConfiguration")
        sched = {a["name"]: a["value"] for a in cluster["scheduler"]["extraArgs"]}
        sched_config = yaml.safe_load(file_in(data, sched["config"]))
        assert [prof["schedulerName"] for prof in sched_config["profiles"]] == ["default-scheduler"]
        assert sched["feature-gates"] == "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
        kubelet = next(d for d in docs if d["kind"] == "KubeletConfiguration")
        assert "failCgroupV1" not in kubelet  # production nodes run cgroup v2: kubelet's refusal of v1 stays
        # left out of the zones' health: a WAN outage is then every zone down, and evicts nothing (docs/azure.md)
        args = {a["name"]: a["value"] for a in init["nodeRegistration"]["kubeletExtraArgs"]}
        assert f"{planmod.DISRUPTION_EXEMPT_LABEL}=true" in args["node-labels"].split(",")
    assert kinds == {("ClusterConfiguration", "InitConfiguration", "KubeletConfiguration")}
    assert scripts == {True}


# ----------------------------------------------------------------------------- secrets and outputs


def test_outputs_contract(stack: StackRun) -> None:
    p = plan_of(stack)
    out = stack.outputs
    assert set(CONTRACT) <= set(out)
    assert out["apiserver_endpoint"] == f"https://{p.apiserver_lb_ip}:6443"
    assert out["ca_cert_hash"] == pki.ca_cert_hash(out["ca_cert_pem"])
    assert out["ca_cert_hash"].startswith("sha256:") and len(out["ca_cert_hash"]) == 7 + 64
    assert out["etcd_endpoints"] == [f"https://{m.ip}:2379" for m in p.members_of("etcd")]
    assert out["vpn_gateway_ip"] == "20.0.0.1"
    assert out["backup_container_url"].endswith("/" + p.env.backups.container)
    assert out["key_vault_uri"].startswith("https://")
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", out["bootstrap_token"])


def test_admin_kubeconfig_authenticates_with_the_cluster_ca(stack: StackRun) -> None:
    config = yaml.safe_load(stack.outputs["admin_kubeconfig"])
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == stack.outputs["apiserver_endpoint"]
    assert base64.b64decode(cluster["certificate-authority-data"]).decode() == stack.outputs["ca_cert_pem"]
    user = config["users"][0]["user"]
    cert = pki.load_cert(base64.b64decode(user["client-certificate-data"]).decode())
    cert.verify_directly_issued_by(pki.load_cert(stack.outputs["ca_cert_pem"]))
    assert "O=kubeadm:cluster-admins" in cert.subject.rfc4514_string()


def test_secrets_are_secret(stack: StackRun) -> None:
    assert {"bootstrap_token", "admin_kubeconfig", "vpn_shared_key", "admin_ssh_private_key"} <= stack.secret_outputs
    for public in ("apiserver_endpoint", "ca_cert_pem", "ca_cert_hash", "etcd_endpoints", "key_vault_uri"):
        assert public not in stack.secret_outputs
    for vm in stack.of_type("compute:VirtualMachine"):
        assert is_secret(vm.inputs["osProfile"]) or is_secret(vm.inputs["osProfile"].get("customData")), vm.name
    for secret in stack.of_type("keyvault:Secret"):
        assert is_secret(secret.inputs["properties"]), secret.name
        # ARM cannot delete a secret and the vault's data plane is closed to the deployer: a removed secret is
        # forgotten, never a failed delete (a pool removed, destroy)
        opts = stack.options[("azure-native:keyvault:Secret", secret.name)]
        assert opts is not None and opts.retain_on_delete, secret.name
    names = {s.plain["secretName"] for s in stack.of_type("keyvault:Secret")}
    assert {"bootstrap-token", "pool-bootstrap-token", "kubernetes-ca-key", "etcd-ca-key", "vpn-shared-key"} <= names
    # No private key or token appears in any output that is not secret.
    secrets = [r.state["key_pem"] for r in stack.resources if r.state.get("key_pem")]
    secrets += [r.state["value"] for r in stack.resources if r.state.get("value")]
    for name, value in stack.outputs.items():
        if name not in stack.secret_outputs:
            text = str(value)
            assert "PRIVATE KEY" not in text and not any(s in text for s in secrets), name


def test_cloud_pool_nodes_join_as_workers(stack: StackRun) -> None:
    for pool in plan_of(stack).pools:
        scale_set = stack.one("compute:VirtualMachineScaleSet", f"pool-{pool.name}")
        assert is_secret(scale_set.inputs["virtualMachineProfile"])  # the user-data holds the join token
        os_profile = scale_set.plain["virtualMachineProfile"]["osProfile"]
        config = yaml.safe_load(base64.b64decode(os_profile["customData"]))
        join = yaml.safe_load(file_in(config, "/etc/skyrack/kubeadm.yaml"))
        assert join["kind"] == "JoinConfiguration" and "controlPlane" not in join
        assert join["discovery"]["bootstrapToken"]["apiServerEndpoint"] == stack.outputs["apiserver_endpoint"][8:]
        # The pools' own token (the cluster layer gives it no expiry), never the racks' expiring one.
        assert join["discovery"]["bootstrapToken"]["token"] == stack.outputs["pool_bootstrap_token"]
        assert stack.outputs["pool_bootstrap_token"] != stack.outputs["bootstrap_token"]
        assert "pool_bootstrap_token" in stack.secret_outputs
        assert join["discovery"]["bootstrapToken"]["caCertHashes"] == [stack.outputs["ca_cert_hash"]]
        kubelet = {a["name"]: a["value"] for a in join["nodeRegistration"]["kubeletExtraArgs"]}
        assert f"{planmod.POOL_LABEL}={pool.name}" in kubelet["node-labels"].split(",")
        assert f"{planmod.DISRUPTION_EXEMPT_LABEL}=true" in kubelet["node-labels"].split(",")  # a cloud Node
        # Tainted until cloud-node-manager sets the providerID cluster-autoscaler maps to the instance.
        assert kubelet["cloud-provider"] == "external"
        assert "taints" not in join["nodeRegistration"]
