"""One renderer, two targets: the lab's seed for a member is byte for byte the custom data the Pulumi stack
gives that member's Azure VM, when both have the same plan and certificates.

The stack runs under Pulumi's mocks (tests/pulumi/pulumi_harness.py, the Azure area's
harness); its certificates come out of the mocked state and go into the lab's code path
(`lab.controlplane.user_data`, what `skyrack etcd lab-up` seeds). The stack refuses lab
environments, so this uses configs/dev.yaml; the only thing that differs in a lab
environment is the data disk, which the environment decides (test_userdata.py).
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pulumi"))
pulumi_harness = pytest.importorskip("pulumi_harness")

from skyrack import certs, pki  # noqa: E402
from skyrack import plan as planmod  # noqa: E402
from skyrack.lab import controlplane  # noqa: E402


def plan_pki_from_stack(state: dict[str, dict]) -> certs.PlanPki:
    issued = lambda s: pki.Issued(s["cert_pem"], s["key_pem"])  # noqa: E731
    return certs.PlanPki(
        cas={ca: issued(state[f"{ca}-ca"]) for ca in certs.CAS},
        certs={k: issued(v) for k, v in state.items() if "cert_pem" in v and not k.endswith("-ca")},
        service_account=pki.Issued(state["service-account"]["public_pem"], state["service-account"]["key_pem"]),
        bootstrap_token=state["bootstrap-token"]["value"])


def test_lab_seed_is_the_stacks_custom_data():
    run = pulumi_harness.run_stack("dev")
    plan = planmod.make(pulumi_harness.CONFIGS / "dev.yaml")
    repo = pulumi_harness.DEFAULT_CONFIG["skyrack:kubernetesAptRepo"]
    seeds = controlplane.user_data(plan, plan_pki_from_stack(run.pki_state()), repo,
                                   backup_url=run.outputs["backup_container_url"])
    vms = {vm.name: base64.b64decode(vm.plain["osProfile"]["customData"]) for vm in run.of_type("VirtualMachine")}
    assert set(vms) == {m.name for m in plan.members} == set(seeds)
    for name, custom_data in vms.items():
        assert seeds[name].encode() == custom_data, f"{name}: the lab would boot other bytes than Azure"
