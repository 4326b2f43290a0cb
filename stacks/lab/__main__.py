"""The lab's control-plane stack: the outputs of the control plane `skyrack lab up` booted.

What the Azure program exports from the VMs it creates, this program exports from the lab's
PKI and plan, through the same `skyrack.stackio.export` (so a secret output is a Pulumi
secret here too). It creates no resources: the lab's nodes are not Pulumi's to manage.
"""

from __future__ import annotations

from pathlib import Path

import pulumi

from skyrack import outputs as contract
from skyrack import plan as planmod
from skyrack.errors import InputError
from skyrack.lab import cluster
from skyrack.lab.state import Paths, load
from skyrack.stackio import export

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    stack = pulumi.get_stack()
    env = pulumi.Config("skyrack").get("environment") or str(ROOT / "configs" / f"{stack}.yaml")
    try:
        plan = planmod.make(Path(env))
        if plan.env.lab is None:
            raise pulumi.RunError(f"{env}: not a lab environment (no `lab:` section): its control plane is "
                                  f"the Azure program's (`pulumi up -s {stack}` at the repository root)")
        paths = Paths.for_bridge(plan.env.lab.bridge)
        if load(paths) is None:
            raise pulumi.RunError(f"{env}: the lab is not up: run `skyrack lab up {env}` first")
        values = cluster.outputs(plan, paths)
    except InputError as exc:
        raise pulumi.RunError(str(exc)) from None
    export(values, required=contract.LAB_STAND_IN)


main()
