"""A first boot can reach the mirrors: on-prem names resolve, the tunnel is up, apt retries.

prod's mirrors are names only the site's DNS knows (apt-proxy.lab.internal): a DNS Private
Resolver forwards that zone to the on-prem DNS servers over the VPN, and no VM or scale set
is created before the VPN connection and the forwarding exist. dev uses public mirrors
through the NAT gateway and waits for nothing.
"""

from __future__ import annotations

import base64

import pulumi
import pytest
import yaml
from pulumi_harness import CONFIGS, DEFAULT_CONFIG, ONPREM_DNS, AzureMocks, StackRun, run_stack

from skyrack import plan as planmod
from skyrack.azure import dns

FIRST_BOOT = {"onprem-connection", "dns-ruleset-link"}


def waits_for(stack: StackRun, typ: str, name: str) -> set[str]:
    opts = stack.options[(typ, name)]
    return {d._name for d in (opts.depends_on or [])} if opts else set()


def test_prod_forwards_the_mirrors_zone_to_onprem_dns(prod: StackRun) -> None:
    assert dns.onprem_domains(planmod.make(CONFIGS / "prod.yaml").env) == ["lab.internal."]
    (rule,) = prod.of_type("dnsresolver:ForwardingRule")
    assert rule.plain["domainName"] == "lab.internal."
    assert rule.plain["targetDnsServers"] == [{"ipAddress": ONPREM_DNS, "port": 53}]
    assert rule.plain["forwardingRuleState"] == "Enabled"
    link = prod.one("dnsresolver:PrivateResolverVirtualNetworkLink", "dns-ruleset-link").plain
    vnet = prod.one("network:VirtualNetwork", "vnet")
    assert link["virtualNetwork"]["id"] == vnet.state["id"]
    outbound = prod.one("dnsresolver:OutboundEndpoint", "dns-outbound").plain
    assert outbound["subnet"]["id"].endswith(f"/subnets/{dns.SUBNET}")
    subnet = next(s for s in vnet.plain["subnets"] if s["name"] == dns.SUBNET)
    assert subnet["delegations"] == [{"name": "dns-resolver", "serviceName": "Microsoft.Network/dnsResolvers"}]
    assert "networkSecurityGroup" not in subnet and "natGateway" not in subnet


def test_no_machine_boots_before_the_tunnel_and_the_forwarding(prod: StackRun) -> None:
    machines = [(r.typ, r.name) for r in prod.resources
                if r.typ in ("azure-native:compute:VirtualMachine", "azure-native:compute:VirtualMachineScaleSet")]
    assert len(machines) == 15 + len(prod.of_type("compute:VirtualMachineScaleSet"))
    for typ, name in machines:
        assert FIRST_BOOT <= waits_for(prod, typ, name), name


def test_dev_uses_public_mirrors_and_waits_for_nothing(dev: StackRun) -> None:
    assert not dev.of_type("dnsresolver:DnsResolver")
    for vm in dev.of_type("compute:VirtualMachine"):
        assert not waits_for(dev, vm.typ, vm.name) & FIRST_BOOT


@pytest.mark.parametrize(("servers", "message"), [
    (None, r"mirrors\.apt_proxy: apt-proxy\.lab\.internal is a name only on-prem DNS knows: set stack config "
           r"skyrack:onpremDnsServers"),
    ('["192.0.2.53"]', r"skyrack:onpremDnsServers: 192\.0\.2\.53 is not in a range routed over the VPN"),
])
def test_prod_without_a_way_to_its_mirror_names_registers_nothing(servers, message) -> None:
    config = {k: v for k, v in DEFAULT_CONFIG.items() if k != "skyrack:onpremDnsServers"}
    if servers:
        config["skyrack:onpremDnsServers"] = servers
    mocks = AzureMocks()
    with pytest.raises(pulumi.RunError, match=message):
        run_stack("prod", config=config, mocks=mocks)
    assert mocks.resources == []


def test_apt_retries_transient_failures_at_first_boot(stack: StackRun) -> None:
    for vm in stack.of_type("compute:VirtualMachine"):
        config = yaml.safe_load(base64.b64decode(vm.plain["osProfile"]["customData"]))
        conf = config["apt"]["conf"]
        assert 'Acquire::Retries "3";' in conf, vm.name  # a blip; a late mirror is the boot scripts' to wait for
        assert "Acquire::http::Timeout" in conf
