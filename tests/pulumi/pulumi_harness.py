"""Run the Pulumi program under `pulumi.runtime.set_mocks`: no CLI, no Azure.

`run_stack(name)` resets Pulumi's root resource, installs fresh mocks, runs
`stacks/controlplane.run` and returns every registered resource (type, name, inputs)
and the resolved stack outputs with their secretness. The mocks answer like Azure
would in the ways the program relies on: resource IDs, a managed identity's principal
ID (and a user-assigned one's client ID), a public IP, the VPN gateway's BGP address, the
storage account's blob endpoint, the vault URI, and the PKI
resources' real contents (the dynamic provider's own `make`, so real certificates).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import settings as pulumi_settings

from support import unwrap

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
sys.path.insert(0, str(ROOT / "stacks"))

import controlplane  # noqa: E402
from skyrack.azure import pki as azure_pki  # noqa: E402

SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
TENANT = "11111111-1111-1111-1111-111111111111"
DYNAMIC = "pulumi-python:dynamic/skyrack:"
# The input holding a resource's own Azure name, where it is not <lowerCamelType>Name.
OWN_NAME = {"VirtualMachine": "vmName", "VirtualMachineScaleSet": "vmScaleSetName", "StorageAccount": "accountName",
            "BlobContainer": "containerName", "PrivateRecordSet": "relativeRecordSetName", "Vault": "vaultName",
            "PrivateZone": "privateZoneName", "PrivateResolverVirtualNetworkLink": "virtualNetworkLinkName",
            "UserAssignedIdentity": "resourceName", "RoleDefinition": "roleDefinitionId"}
MOCK_BGP_ADDRESS = "10.0.0.30"
ONPREM_DNS = "10.64.0.53"
DEFAULT_CONFIG = {"skyrack:kubernetesAptRepo": "https://k8s-apt.example.test/core/stable/v1.31/deb/",
                  "skyrack:onpremDnsServers": f'["{ONPREM_DNS}"]'}  # prod's mirrors are on-prem names



@dataclass
class Registered:
    typ: str
    name: str
    inputs: dict[str, Any]  # as sent, secrets still wrapped
    state: dict[str, Any] = field(default_factory=dict)  # what the mock answered

    @property
    def plain(self) -> dict[str, Any]:
        return unwrap(self.inputs)


class AzureMocks(pulumi.runtime.Mocks):
    """`prior`: the PKI state of an earlier run, by resource name. Like the engine, a PKI resource
    whose provider `diff` asks for no replacement keeps that state instead of being created anew."""

    def __init__(self, prior: dict[str, dict[str, Any]] | None = None, subscription: str = SUBSCRIPTION) -> None:
        self.resources: list[Registered] = []
        self.prior = prior or {}
        self.subscription = subscription
        self.options: dict[tuple[str, str], pulumi.ResourceOptions | None] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        inputs = dict(args.inputs)
        inputs.pop("__provider", None)
        plain = unwrap(inputs)
        if args.typ.startswith(DYNAMIC):
            old = self.prior.get(args.name)
            if old is not None and not azure_pki.PkiProvider().diff("", old, plain).replaces:
                state = old
            else:
                state = {**plain, **azure_pki.make(plain)}
            self.resources.append(Registered(args.typ, args.name, inputs, state))
            return f"{args.name}-id", state
        kind = args.typ.split(":")[-1]
        own = OWN_NAME.get(kind, kind[0].lower() + kind[1:] + "Name")
        name = plain.get(own) or args.name  # Azure's name, or Pulumi's auto-name stand-in
        group = plain.get("resourceGroupName", name)
        rid = f"/subscriptions/{self.subscription}/resourceGroups/{group}/providers/{kind}/{name}"
        state = {**plain, "name": name, "id": rid}
        if kind in ("VirtualMachine", "VirtualMachineScaleSet"):
            state["identity"] = {**plain.get("identity", {}), "principalId": f"principal-{name}"}
            if "userAssignedIdentities" in state["identity"]:  # a list of IDs in, a map by ID out (as Azure answers)
                state["identity"]["userAssignedIdentities"] = {i: {} for i in state["identity"]["userAssignedIdentities"]}
        elif kind == "UserAssignedIdentity":
            state.update(principalId=f"principal-{name}", clientId=f"client-{name}")
        elif kind == "VirtualNetworkGateway" and plain.get("enableBgp"):
            # Azure gives the gateway a BGP address in GatewaySubnet (its last usable one).
            state["bgpSettings"] = {**plain.get("bgpSettings", {}), "bgpPeeringAddress": MOCK_BGP_ADDRESS}
        elif kind == "PublicIPAddress":
            state["ipAddress"] = "20.0.0.1" if "vpn" in name else "20.0.0.2"
        elif kind == "StorageAccount":
            state["primaryEndpoints"] = {"blob": f"https://{name}.blob.core.windows.net/"}
        elif kind == "Vault":
            state["properties"] = {**plain.get("properties", {}), "vaultUri": f"https://{name}.vault.azure.net/"}
        self.resources.append(Registered(args.typ, args.name, inputs, state))
        return rid, state

    def call(self, args: pulumi.runtime.MockCallArgs) -> Any:
        if args.token == "azure-native:authorization:getClientConfig":
            return {"clientId": "client", "objectId": "object", "subscriptionId": self.subscription,
                    "tenantId": TENANT}
        raise NotImplementedError(args.token)


@dataclass
class StackRun:
    name: str
    resources: list[Registered]
    outputs: dict[str, Any]
    secret_outputs: set[str]
    options: dict[tuple[str, str], pulumi.ResourceOptions | None] = field(default_factory=dict)

    def of_type(self, suffix: str) -> list[Registered]:
        return [r for r in self.resources if r.typ.endswith(suffix)]

    def pki_state(self) -> dict[str, dict[str, Any]]:
        return {r.name: r.state for r in self.resources if r.typ.startswith(DYNAMIC)}

    def one(self, suffix: str, name: str) -> Registered:
        found = [r for r in self.of_type(suffix) if r.name == name]
        assert len(found) == 1, f"expected one {suffix} {name!r}, found {len(found)}"
        return found[0]


def run_stack(name: str, configs_dir: Path = CONFIGS, config: dict[str, str] | None = None,
              mocks: AzureMocks | None = None) -> StackRun:
    """Run the program for stack `name` in a fresh Pulumi runtime; raise what the program raises."""
    pulumi_settings.ROOT.set(None)  # isolation: a new root Stack resource for this run
    mocks = mocks or AzureMocks()
    pulumi.runtime.set_mocks(mocks, project="skyrack", stack=name, preview=False)
    pulumi.runtime.set_all_config(DEFAULT_CONFIG if config is None else config)
    box: dict[str, Any] = {}

    def record(args: pulumi.ResourceTransformationArgs) -> None:
        mocks.options[(args.type_, args.name)] = args.opts  # what the engine would be told (mocks see inputs only)

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        pulumi.runtime.register_stack_transformation(record)
        outputs = controlplane.run(name, configs_dir)
        box["secret"] = {k: asyncio.ensure_future(pulumi.Output.from_input(v).is_secret()) for k, v in outputs.items()}
        return pulumi.Output.from_input(outputs).apply(lambda v: box.update(values=v))

    program()
    secret = {k for k, fut in box["secret"].items() if fut.result()}
    return StackRun(name, mocks.resources, box["values"], secret, mocks.options)
