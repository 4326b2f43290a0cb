"""The roll docs/azure.md prescribes for a control-plane VM, on the real Pulumi engine skyrack builds.

A member's user-data and size are `ignore_changes` (skyrack.azure.vm.ROLLED_BY_REPLACEMENT) so that
no `pulumi up` touches every member at once, and the docs promise that replacing one member
(`pulumi up --replace <urn> --target <urn> --target-dependents`) boots it with the *current* user-data
and size, deleting the old VM first (fixed names). Whether an ignored property's new value or the one
in state goes to the replacement is the engine's decision, not the provider's: Azure cannot run here,
so a Python dynamic provider stands in for `compute.VirtualMachine`, with the same resource options as
skyrack.azure.vm, and records what it was asked to do. Needs the built engine, less its Kubernetes provider
(`skyrack lab build --site`).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from skyrack import upstream
from skyrack.build import pulumi as built
from skyrack.engine import Workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]
PROJECT, STACK = "roll", "lab"

PROGRAM = textwrap.dedent('''
    import pulumi
    from pulumi.dynamic import CreateResult, Resource, ResourceProvider

    from skyrack.azure.vm import ROLLED_BY_REPLACEMENT

    config = pulumi.Config()
    LOG = config.require("log")


    class Vm(ResourceProvider):
        def create(self, props):
            with open(LOG, "a") as f:
                f.write(f"create {props['osProfile']['customData']} {props['hardwareProfile']['vmSize']}\\n")
            return CreateResult("skyrack-lab-apiserver-0", outs=props)

        def delete(self, id, props):
            with open(LOG, "a") as f:
                f.write(f"delete {props['osProfile']['customData']}\\n")


    class Nic(ResourceProvider):
        def create(self, props):
            return CreateResult("nic-0", outs=props)


    class VirtualMachine(Resource):
        osProfile: pulumi.Output[dict]


    class NetworkInterface(Resource):
        pass


    nic = NetworkInterface(Nic(), "apiserver-0-nic", {"address": "10.0.0.4"})
    vm = VirtualMachine(Vm(), "apiserver-0", {
        "nic": nic.id,
        "osProfile": {"computerName": "apiserver-0", "customData": config.require("userData")},
        "hardwareProfile": {"vmSize": config.require("size")},
    }, pulumi.ResourceOptions(ignore_changes=list(ROLLED_BY_REPLACEMENT), delete_before_replace=True))
    pulumi.export("customData", vm.osProfile["customData"])
''')


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, Path, Path]:
    root = tmp_path_factory.mktemp("roll")
    program = root / "program"
    program.mkdir()
    (program / "Pulumi.yaml").write_text(f"name: {PROJECT}\nruntime: python\n")
    (program / "__main__.py").write_text(PROGRAM)
    ws = Workspace(built.engine(upstream.PULUMI, lambda _: None, kubernetes=False), root / "ws").create()
    ws.ensure_stack(program, PROJECT, STACK)
    return ws, program, root / "provider.log"


def up(ws: Workspace, program: Path, log: Path, user_data: str, size: str, *extra: str) -> dict:
    ws.set_config(program, PROJECT, STACK, {"log": str(log), "userData": user_data, "size": size})
    ws.run(program, ["up", "--yes", "--skip-preview", *extra], stack=STACK, project=PROJECT)
    out = ws.run(program, ["stack", "output", "--json"], stack=STACK, project=PROJECT)
    return json.loads(out)


def test_new_user_data_waits_for_a_replacement_which_boots_with_it(workspace) -> None:
    ws, program, log = workspace
    assert up(ws, program, log, "boot-1.36", "Standard_D8s_v5")["customData"] == "boot-1.36"
    assert log.read_text().splitlines() == ["create boot-1.36 Standard_D8s_v5"]

    # the template moved on (a new Kubernetes minor) and the size grew: `pulumi up` leaves the member alone
    assert up(ws, program, log, "boot-1.37", "Standard_D16s_v5")["customData"] == "boot-1.36"
    assert log.read_text().splitlines() == ["create boot-1.36 Standard_D8s_v5"]

    # the documented roll of this one member: deleted first, then created with the current values
    urns = ws.run(program, ["stack", "--show-urns"], stack=STACK, project=PROJECT)
    urn = next(w for w in urns.split() if w.startswith("urn:pulumi:") and w.endswith("::apiserver-0"))
    after = up(ws, program, log, "boot-1.37", "Standard_D16s_v5", "--replace", urn, "--target", urn,
               "--target-dependents")
    assert log.read_text().splitlines() == ["create boot-1.36 Standard_D8s_v5", "delete boot-1.36",
                                            "create boot-1.37 Standard_D16s_v5"]
    assert after["customData"] == "boot-1.37"
