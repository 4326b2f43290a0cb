"""The Pulumi policy pack's checks on Azure resources (what `pulumi preview --policy-pack
policy` feeds them), without the Pulumi CLI: the same rule functions as `skyrack check`."""

from __future__ import annotations

import sys
from typing import Any

from skyrack.policies import azure
from support import ROOT, policy_pack_declared

VNET = ("azure-native:network:VirtualNetwork", "vnet", {"subnets": [
    {"name": "apiservers", "addressPrefix": "10.0.0.32/28"},
    {"name": "etcd", "addressPrefix": "10.0.0.48/28"},
]})


def nsg(*rules: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    return (azure.NSG, "etcd-nsg", {"securityRules": [
        {"direction": "Inbound", "access": "Allow", "protocol": "Tcp", **r} for r in rules]})


def test_apiserver_open_to_the_internet_is_a_violation():
    bad = nsg({"name": "api", "sourceAddressPrefix": "Internet", "destinationAddressPrefix": "*",
               "destinationPortRange": "6443"})
    (message,) = azure.apiserver_violations(*bad)
    assert "etcd-nsg/api admits 0.0.0.0/0 to the API server" in message


def test_apiserver_open_to_an_office_passes_and_other_ports_are_not_its_business():
    ok = nsg({"name": "api", "sourceAddressPrefixes": ["203.0.113.0/24"], "destinationPortRange": "6443"},
             {"name": "https", "sourceAddressPrefix": "*", "destinationPortRanges": ["443"]},
             {"name": "deny", "access": "Deny", "sourceAddressPrefix": "*", "destinationPortRange": "*"})
    assert azure.apiserver_violations(*ok) == []


def test_a_standalone_security_rule_resource_is_checked_too():
    props = {"securityRuleName": "api", "direction": "Inbound", "access": "Allow", "sourceAddressPrefix": "*",
             "destinationPortRange": "6000-7000"}
    assert azure.apiserver_violations(azure.SECURITY_RULE, "api-rule", props)


def test_etcd_reached_only_from_the_control_plane_passes():
    ok = nsg({"name": "client", "sourceAddressPrefix": "10.0.0.32/28", "destinationAddressPrefix": "10.0.0.48/28",
              "destinationPortRange": "2379"},
             {"name": "peer", "sourceAddressPrefix": "10.0.0.48/28", "destinationPortRange": "2380"})
    assert azure.etcd_violations([VNET, ok]) == []


def test_etcd_reached_from_the_virtual_network_or_on_prem_is_a_violation():
    bad = nsg({"name": "vnet", "sourceAddressPrefix": "VirtualNetwork", "destinationPortRange": "2379-2380"},
              {"name": "onprem", "sourceAddressPrefix": "10.64.0.0/14", "destinationAddressPrefix": "10.0.0.48/28",
               "destinationPortRange": "*"})
    messages = azure.etcd_violations([VNET, bad])
    assert messages == ["etcd-nsg/vnet admits a service tag to etcd (10.0.0.48/28, port 2379)",
                        "etcd-nsg/onprem admits 10.64.0.0/14 to etcd (10.0.0.48/28, port 2379)"]


def test_a_source_that_contains_the_etcd_subnet_is_a_violation_on_any_port():
    bad = nsg({"name": "ssh", "sourceAddressPrefix": "10.0.0.0/16", "destinationPortRange": "22"})
    (message,) = azure.etcd_violations([VNET, (azure.SUBNET, "x", {"subnetName": "etcd-events",
                                                                    "addressPrefix": "10.0.0.64/28"}), bad])
    assert "includes the etcd subnet 10.0.0.48/28" in message


def test_a_stack_without_etcd_subnets_has_nothing_to_check():
    bad = nsg({"name": "any", "sourceAddressPrefix": "*", "destinationPortRange": "*"})
    assert azure.etcd_violations([bad]) == []


def test_the_pack_finds_the_checkouts_skyrack_without_site_packages():
    """policy/ runs in its own virtualenv (pulumi-policy's protobuf): it imports skyrack from modules/, alone."""
    found = policy_pack_declared(sys.executable, ROOT / "policy")
    assert found["declared"] == [["skyrack", ["apiserver-not-public", "etcd-isolated"]]]
    assert found["skyrack"] == str(ROOT / "modules/skyrack/__init__.py")
