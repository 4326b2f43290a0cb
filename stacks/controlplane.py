"""The Azure control plane of one environment, composed from its plan.

`run(stack, configs_dir)` is the whole program: it loads `configs/<stack>.yaml` through
`skyrack.plan.make` (validation and the reviewed lock file), reads the stack's settings,
and only then registers resources, so bad input stops before anything is created. The
outputs are the contract in `skyrack.outputs` (read by the rack join and the cluster layer):
`export` refuses a name it does not declare, and makes secret exactly what it marks secret.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
from pulumi_azure_native import authorization, resources

from skyrack import plan as planmod
from skyrack.azure import dns
from skyrack.azure.apiservers import ApiServers
from skyrack.azure.autoscaler import AutoscalerIdentity
from skyrack.azure.backups import EtcdBackups
from skyrack.azure.context import Context, env_tags
from skyrack.azure.dns import DnsForwarder
from skyrack.azure.etcd import EtcdCluster
from skyrack.azure.hybrid import HybridLink, onprem_prefixes
from skyrack.azure.network import Network
from skyrack.azure.pki import ControlPlanePki, KeyPair, RandomSecret
from skyrack.azure.pools import CloudPool
from skyrack.azure.rules import pool_subnet
from skyrack.azure.vault import Vault
from skyrack.errors import InputError, Problem
from skyrack.render.kubeconfig import kubeconfig
from skyrack.stackio import export


@dataclass(frozen=True)
class Settings:
    """Per-stack settings (`configs/Pulumi.<stack>.yaml`, namespace `skyrack`)."""

    kubernetes_repo: str
    vpn_shared_key: pulumi.Output[str] | None
    admin_ssh_public_key: str | None
    backup_operators: tuple[str, ...] = ()  # Azure AD object IDs allowed to read and write snapshots
    dns_forwarding: dns.Forwarding | None = None  # on-prem mirror names resolved through on-prem DNS


def read_settings(plan: planmod.Plan, config: pulumi.Config) -> Settings:
    if plan.env.lab is not None:
        raise InputError([Problem(str(plan.source), "lab", "a lab environment runs on this machine "
                                  "(systemd-nspawn nodes), not in Azure: there is no stack for it")])
    repo = plan.env.mirrors.kubernetes or config.get("kubernetesAptRepo")
    if not repo:
        raise InputError([Problem(str(plan.source), "mirrors.kubernetes",
                                  "not set, and stack config skyrack:kubernetesAptRepo is not set either: the API "
                                  "servers need a Kubernetes apt repository (see docs/azure.md)")])
    operators = tuple(config.get_object("backupOperators") or ())
    return Settings(kubernetes_repo=repo, vpn_shared_key=config.get_secret("vpnSharedKey"),
                    admin_ssh_public_key=config.get("adminSshPublicKey"), backup_operators=operators,
                    dns_forwarding=dns_forwarding(plan, config))


def dns_forwarding(plan: planmod.Plan, config: pulumi.Config) -> dns.Forwarding | None:
    """Mirrors named in an on-prem zone need on-prem DNS at first boot: the servers come from stack config."""
    env, source = plan.env, str(plan.source)
    domains = dns.onprem_domains(env)
    if not domains:
        return None
    field, host = next((f, h) for f, h in dns.mirror_hosts(env) if h.endswith(dns.PRIVATE_SUFFIXES))
    if env.onprem.vpn is None:
        raise InputError([Problem(source, field, f"{host} is a name only on-prem DNS knows, and there is no "
                                  "onprem.vpn to reach it through")])
    servers = config.get_object("onpremDnsServers") or []
    if not servers:
        raise InputError([Problem(source, field, f"{host} is a name only on-prem DNS knows: set stack config "
                                  "skyrack:onpremDnsServers to the site's DNS servers (a JSON list of addresses, "
                                  "reached over the VPN), or the VMs' first boot cannot reach the mirrors")])
    routed = [ipaddress.ip_network(p) for p in onprem_prefixes(plan)]
    for server in servers:
        try:
            addr = ipaddress.ip_address(server)
        except ValueError:
            raise InputError([Problem(source, field, f"skyrack:onpremDnsServers: {server!r} is not an IP address")]) \
                from None
        if not any(addr in net for net in routed):
            raise InputError([Problem(source, field, f"skyrack:onpremDnsServers: {server} is not in a range routed "
                                      f"over the VPN ({', '.join(map(str, routed))})")])
    return dns.Forwarding(tuple(domains), tuple(servers))


def deploy(plan: planmod.Plan, settings: Settings) -> dict[str, Any]:
    env = plan.env
    client = authorization.get_client_config_output()
    group = resources.ResourceGroup("resource-group", resource_group_name=env.resource_group,
                                    location=env.azure.location, tags=env_tags(env.name))
    ctx = Context(plan, group.name, client.subscription_id, client.tenant_id)

    net = Network("network", ctx, dns_resolver=settings.dns_forwarding is not None)
    pki = ControlPlanePki("pki", plan)
    outputs: dict[str, Any] = {}
    if settings.admin_ssh_public_key:
        ssh_key: pulumi.Input[str] = settings.admin_ssh_public_key
    else:
        generated = KeyPair("admin-ssh", "ssh")
        ssh_key = generated.public_key
        outputs["admin_ssh_private_key"] = generated.key_pem  # secret: the contract says so (export)

    vpn_ip: pulumi.Input[str | None] = None
    bgp_address: pulumi.Input[str | None] = None
    boot_after: list[pulumi.Resource] = []  # what a first boot needs: the way to the site's mirrors
    vpn_key: pulumi.Input[str] | None = None
    if env.onprem.vpn is not None:
        vpn_key = settings.vpn_shared_key or RandomSecret("vpn-shared-key", "secret").value
        link = HybridLink("hybrid", ctx, net.subnet_ids["GatewaySubnet"], pulumi.Output.secret(vpn_key))
        vpn_ip, bgp_address = link.public_ip, link.bgp_peering_address
        outputs["vpn_shared_key"] = pulumi.Output.secret(vpn_key)
        if any((env.mirrors.apt_proxy, env.mirrors.kubernetes, env.mirrors.registry)):
            boot_after.append(link.connection)  # the mirrors are the site's, behind the tunnel
    if settings.dns_forwarding is not None:
        forwarder = DnsForwarder("dns", ctx, net.vnet.id, net.subnet_ids[dns.SUBNET], settings.dns_forwarding)
        boot_after.append(forwarder.link)

    etcd_roles = [r for r in ("etcd", "etcd-events") if plan.members_of(r)]
    backups = EtcdBackups("backups", ctx, [net.subnet_ids[r] for r in etcd_roles])
    clusters = [EtcdCluster(role, ctx, role, net.subnet_ids[role], pki, ssh_key, backups.container_url,
                            settings.kubernetes_repo, boot_after)
                for role in etcd_roles]
    etcd = clusters[0]
    # cluster-autoscaler runs on the API servers (skyrack.kube.autoscaler) with this identity, when there is a pool
    autoscaler = AutoscalerIdentity("autoscaler", ctx) if plan.pools else None
    api = ApiServers("apiservers", ctx, net.subnet_ids["apiservers"], pki, ssh_key, settings.kubernetes_repo,
                     boot_after, identities=[autoscaler.id] if autoscaler else None)
    pools = {pool.name: CloudPool(f"pool-{pool.name}", ctx, pool, net.subnet_ids[pool_subnet(pool.name)],
                                  ssh_key, pki.pool_join(), settings.kubernetes_repo, boot_after).scale_set
             for pool in plan.pools}
    if autoscaler is not None:
        for name, scale_set in pools.items():
            autoscaler.grant(name, scale_set.id, net.subnet_ids[pool_subnet(name)])
        outputs["cloud_pool_scale_sets"] = {name: s.name for name, s in pools.items()}  # its node groups
        outputs["autoscaler_credentials"] = autoscaler.credentials  # secret: the contract says so (export)

    vault_secrets: dict[str, pulumi.Input[str]] = {
        "bootstrap-token": pki.bootstrap_token.value,
        "service-account-key": pki.service_account.key_pem,
        **{f"{ca}-ca-key": pki.cas[ca].key_pem for ca in pki.cas},
    }
    if pki.pool_bootstrap_token is not None:
        vault_secrets["pool-bootstrap-token"] = pki.pool_bootstrap_token.value
        outputs["pool_bootstrap_token"] = pulumi.Output.secret(pki.pool_bootstrap_token.value)  # the cluster layer's
    if vpn_key is not None:
        vault_secrets["vpn-shared-key"] = vpn_key
    vault = Vault("vault", ctx, vault_secrets)

    for c in clusters:
        for name, vm in c.vms.items():
            backups.grant(name, vm.identity.apply(lambda i: (i.principal_id if i else None) or ""))
    for i, operator in enumerate(settings.backup_operators):  # `skyrack etcd snapshot|restore` with Azure AD
        backups.grant(f"operator-{i}", operator, principal_type="User")

    kube_ca, admin = pki.cas["kubernetes"], pki.certs["admin"]
    admin_kubeconfig = pulumi.Output.all(kube_ca.cert_pem, admin.cert_pem, admin.key_pem).apply(
        lambda v: kubeconfig(env.name, plan.apiserver_endpoint, *v))
    outputs.update({
        # Names, shapes and secrecy: skyrack.outputs.CONTRACT (docs/azure.md).
        "apiserver_endpoint": api.endpoint,
        "ca_cert_pem": kube_ca.cert_pem,
        "ca_cert_hash": pki.ca_cert_hash,
        "bootstrap_token": pki.bootstrap_token.value,
        "admin_kubeconfig": admin_kubeconfig,
        "etcd_endpoints": etcd.endpoints,
        "vpn_gateway_ip": vpn_ip,
        "backup_container_url": backups.container_url,
        "key_vault_uri": vault.uri,
        # Extras.
        "etcd_events_endpoints": clusters[1].endpoints if len(clusters) > 1 else [],
        "resource_group": group.name,
        "dns_zone": env.dns_zone,
        "vnet_address_space": plan.vnet_address_space,
        "onprem_routed_prefixes": onprem_prefixes(plan),
        "vpn_bgp_peering_address": bgp_address,  # configure the on-prem device to peer with it (ASN 65515)
        "cert_expiry": pki.cert_expiry,
    })
    return outputs


def run(stack: str, configs_dir: Path) -> dict[str, Any]:
    """Build the stack named `stack` from `configs_dir/<stack>.yaml`; export and return its outputs."""
    try:
        plan = planmod.make(configs_dir / f"{stack}.yaml")
        settings = read_settings(plan, pulumi.Config("skyrack"))
    except InputError as exc:
        # RunError: Pulumi prints the message, no traceback; nothing has been registered yet.
        raise pulumi.RunError(str(exc)) from None
    return export(deploy(plan, settings))
