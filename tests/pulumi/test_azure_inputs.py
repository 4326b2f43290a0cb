"""Bad input stops the program before any resource is registered, with the validator's message."""

from __future__ import annotations

import pulumi
import pytest
from pulumi_harness import DEFAULT_CONFIG, AzureMocks, run_stack

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
    last = "- {name: r01-n04, ip: 10.64.1.14}"
    path.write_text(path.read_text().replace(last, last + "\n      - {name: r01-n05, ip: 10.64.1.15}"))
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
    run = run_stack("prod", config={})
    assert run.outputs["apiserver_endpoint"].startswith("https://")


def test_static_routes_without_an_asn(env_copy) -> None:
    path = env_copy("dev")
    text = path.read_text().replace("vpn: {peer_ip: 198.51.100.10, asn: 65010}", "vpn: {peer_ip: 198.51.100.10}")
    path.write_text(text)
    run = run_stack("dev", path.parent)
    gateway = run.one("network:VirtualNetworkGateway", "vpn-gateway").plain
    local = run.one("network:LocalNetworkGateway", "onprem-gateway").plain
    assert not gateway["enableBgp"] and "bgpSettings" not in gateway and "bgpSettings" not in local
    assert local["localNetworkAddressSpace"]["addressPrefixes"] == ["10.64.0.0/14", "10.128.0.0/24"]


def test_no_vpn_no_gateway(env_copy) -> None:
    path = env_copy("dev")
    path.write_text(path.read_text().replace("  vpn: {peer_ip: 198.51.100.10, asn: 65010}\n", ""))
    run = run_stack("dev", path.parent)
    assert not run.of_type("network:VirtualNetworkGateway") and not run.of_type("network:LocalNetworkGateway")
    assert run.outputs["vpn_gateway_ip"] is None
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
