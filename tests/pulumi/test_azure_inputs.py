"""Bad input stops the program before any resource is registered, with the validator's message."""

from __future__ import annotations

import nsg_eval
import pulumi
import pytest
from pulumi_harness import DEFAULT_CONFIG, AzureMocks, run_stack

from skyrack import plan as planmod
from support import is_secret


def test_invalid_environment_registers_nothing(env_copy) -> None:
    path = env_copy("dev")
    path.write_text(path.read_text().replace("etcd: {count: 3,", "etcd: {count: 4,"))
    mocks = AzureMocks()
    with pytest.raises(pulumi.RunError) as err:
        run_stack("dev", path.parent, mocks=mocks)
    assert f"{path.parent / 'dev.yaml'}: control_plane.etcd.count: 4 is even" in str(err.value)
    assert mocks.resources == []


def test_unreviewed_pod_ranges_register_nothing(env_copy) -> None:
    path = env_copy("dev")
    last = "- {name: r01-n04, ip: 10.67.0.14}"
    path.write_text(path.read_text().replace(last, last + "\n      - {name: r01-n05, ip: 10.67.0.15}"))
    mocks = AzureMocks()
    with pytest.raises(pulumi.RunError, match=r"dev.lock.yaml: out of date: 1 without a pod range \(r01-n05\)"):
        run_stack("dev", path.parent, mocks=mocks)
    assert mocks.resources == []


def test_missing_kubernetes_repository_registers_nothing() -> None:
    mocks = AzureMocks()
    expected = r"mirrors\.kubernetes: not set, and stack config skyrack:kubernetesAptRepo"
    with pytest.raises(pulumi.RunError, match=expected):
        run_stack("dev", config={}, mocks=mocks)
    assert mocks.resources == []
    assert DEFAULT_CONFIG  # the other tests run with the repository set


def test_prod_takes_its_repository_from_the_environment() -> None:
    run = run_stack("prod", config={k: v for k, v in DEFAULT_CONFIG.items() if k != "skyrack:kubernetesAptRepo"})
    assert run.outputs["apiserver_endpoint"].startswith("https://")


def test_static_routes_without_an_asn(env_copy) -> None:
    path = env_copy("dev")
    text = path.read_text().replace("vpn: {peer_ip: 198.51.100.20, asn: 65010, bgp_peer_ip: 10.67.255.254}",
                                    "vpn: {peer_ip: 198.51.100.20}")
    path.write_text(text)
    run = run_stack("dev", path.parent)
    gateway = run.one("network:VirtualNetworkGateway", "vpn-gateway").plain
    local = run.one("network:LocalNetworkGateway", "onprem-gateway").plain
    assert not gateway["enableBgp"] and "bgpSettings" not in gateway and "bgpSettings" not in local
    assert local["localNetworkAddressSpace"]["addressPrefixes"] == ["10.64.0.0/14", "10.192.0.0/24"]


def test_no_vpn_no_gateway(env_copy) -> None:
    path = env_copy("dev")
    path.write_text(path.read_text().replace("  vpn: {peer_ip: 198.51.100.20, asn: 65010, bgp_peer_ip: 10.67.255.254}\n",
                                             ""))
    run = run_stack("dev", path.parent)
    assert not run.of_type("network:VirtualNetworkGateway") and not run.of_type("network:LocalNetworkGateway")
    assert run.outputs["vpn_gateway_ip"] is None and run.outputs["vpn_bgp_peering_address"] is None
    assert "GatewaySubnet" in {s["name"] for s in run.one("network:VirtualNetwork", "vnet").plain["subnets"]}


def test_the_configured_vpn_key_is_used_and_stays_secret() -> None:
    pulumi_config = {**DEFAULT_CONFIG, "skyrack:vpnSharedKey": "configured-pre-shared-key"}
    run = run_stack("dev", config=pulumi_config)
    connection = run.one("network:VirtualNetworkGatewayConnection", "onprem-connection")
    assert is_secret(connection.inputs["sharedKey"])
    assert connection.plain["sharedKey"] == "configured-pre-shared-key"
    assert run.outputs["vpn_shared_key"] == "configured-pre-shared-key" and "vpn_shared_key" in run.secret_outputs
    assert not [r for r in run.resources if r.name == "vpn-shared-key"]


def test_the_lab_has_no_azure_stack() -> None:
    mocks = AzureMocks()
    with pytest.raises(pulumi.RunError, match="lab: a lab environment runs on this machine"):
        run_stack("lab", mocks=mocks)
    assert mocks.resources == []


DEV_VPN = "vpn: {peer_ip: 198.51.100.20, asn: 65010, bgp_peer_ip: 10.67.255.254}"


@pytest.mark.parametrize(("vpn", "message"), [
    ("vpn: {peer_ip: 198.51.100.20, asn: 65010}", "onprem.vpn: bgp_peer_ip is required when asn is set"),
    ("vpn: {peer_ip: 198.51.100.20, asn: 65010, bgp_peer_ip: 198.51.100.20}",
     "onprem.vpn: bgp_peer_ip 198.51.100.20 is not a private address"),
    ("vpn: {peer_ip: 198.51.100.20, bgp_peer_ip: 10.67.255.254}", "onprem.vpn: bgp_peer_ip is set but asn is not"),
])
def test_bgp_needs_a_private_peer_address(env_copy, vpn: str, message: str) -> None:
    path = env_copy("dev")
    path.write_text(path.read_text().replace(DEV_VPN, vpn))
    mocks = AzureMocks()
    with pytest.raises(pulumi.RunError, match=message):
        run_stack("dev", path.parent, mocks=mocks)
    assert mocks.resources == []


def test_operator_networks_reach_6443_over_the_vpn_and_admin_ranges_open_the_firewalls(env_copy) -> None:
    path = env_copy("dev")
    # A private range in admin_cidrs keeps its old meaning (an operator network), next to the new field.
    path.write_text(path.read_text().replace("admin_cidrs: [203.0.113.0/24]",
                                             "admin_cidrs: [203.0.113.0/24, 192.168.7.0/24, 198.51.100.7/32]\n"
                                             "  operator_cidrs: [172.16.8.0/24, 10.64.9.0/24]"))
    run = run_stack("dev", path.parent)
    nsg = run.one("network:NetworkSecurityGroup", "nsg-apiservers").plain
    rule = next(r for r in nsg["securityRules"] if r["name"] == "apiserver-from-operators")
    assert rule["sourceAddressPrefixes"] == ["172.16.8.0/24", "10.64.9.0/24", "192.168.7.0/24"]
    assert rule["destinationPortRange"] == "6443"
    # Replies to operators go back over the tunnel; 10.64.9.0/24 is already inside onprem.cidrs.
    local = run.one("network:LocalNetworkGateway", "onprem-gateway").plain
    prefixes = local["localNetworkAddressSpace"]["addressPrefixes"]
    assert "172.16.8.0/24" in prefixes and "192.168.7.0/24" in prefixes and "10.64.9.0/24" not in prefixes
    # The firewalls take public addresses only (Azure refuses private ranges and /32 there).
    storage = run.of_type("storage:StorageAccount")[0].plain
    assert [r["iPAddressOrRange"] for r in storage["networkRuleSet"]["ipRules"]] == ["203.0.113.0/24",
                                                                                    "198.51.100.7"]
    vault = run.of_type("keyvault:Vault")[0].plain
    assert [r["value"] for r in vault["properties"]["networkAcls"]["ipRules"]] == ["203.0.113.0/24",
                                                                                  "198.51.100.7/32"]
    # `skyrack etcd status/restore/replace-member` from an operator network: etcd's client port and SSH,
    # evaluated as Azure does; never the peer port, and nothing from a public admin range or a rack node
    net = nsg_eval.Network(run.one("network:VirtualNetwork", "vnet").plain["addressSpace"]["addressPrefixes"]
                           + prefixes)
    rules = run.one("network:NetworkSecurityGroup", "nsg-etcd").plain["securityRules"]
    member = planmod.make(path).members_of("etcd")[0].ip
    for src in ("172.16.8.9", "10.64.9.9", "192.168.7.9"):
        assert nsg_eval.allows(rules, net, src, member, 2379) and nsg_eval.allows(rules, net, src, member, 22), src
        assert not nsg_eval.allows(rules, net, src, member, 2380), src
    for src in ("203.0.113.9", "10.64.8.9"):
        assert not any(nsg_eval.allows(rules, net, src, member, port) for port in (22, 2379, 2380)), src


@pytest.mark.parametrize(("operators", "message"), [
    ("[203.0.113.0/24]", "azure.operator_cidrs: 203.0.113.0/24 is not a private range"),
    ("[10.1.5.0/24]", "azure: operator_cidrs 10.1.5.0/24 overlap vnet_cidr"),
])
def test_bad_operator_networks_register_nothing(env_copy, operators: str, message: str) -> None:
    path = env_copy("dev")
    path.write_text(path.read_text().replace("admin_cidrs: [203.0.113.0/24]",
                                             f"admin_cidrs: [203.0.113.0/24]\n  operator_cidrs: {operators}"))
    mocks = AzureMocks()
    with pytest.raises(pulumi.RunError, match=message):
        run_stack("dev", path.parent, mocks=mocks)
    assert mocks.resources == []
