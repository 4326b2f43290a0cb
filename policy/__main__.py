"""skyrack's Pulumi policy pack: `pulumi preview --policy-pack policy`.

Wiring only. The checks are `skyrack.policies.azure` (Azure resources turned into
grants) on top of `skyrack.policies.rules`, the same rule functions `skyrack check`
applies to the plan; both are tested without the Pulumi CLI in tests/gitops/.
"""

import importlib.util
import sys
from pathlib import Path

from pulumi_policy import (
    EnforcementLevel,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)


def _load_skyrack() -> None:
    """Import `skyrack` from beside this pack, alone: the checkout's modules/skyrack (this is the repository's
    policy/), or the installed package this pack is part of (skyrack/policy). Not its site-packages: the pack's
    own virtualenv keeps its protobuf apart from skyrack's environment."""
    here = Path(__file__).resolve().parent
    package = here.parent / "modules" / "skyrack"
    if not (package / "__init__.py").is_file():
        package = here.parent
    spec = importlib.util.spec_from_file_location("skyrack", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["skyrack"] = module
    spec.loader.exec_module(module)


_load_skyrack()

from skyrack.policies import azure  # noqa: E402


def _apiserver(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for message in azure.apiserver_violations(args.resource_type, args.name, args.props):
        report(message, None)


def _etcd(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = [(r.resource_type, r.name, r.props) for r in args.resources]
    for message in azure.etcd_violations(resources):
        report(message, None)


PolicyPack(
    name="skyrack",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=[
        ResourceValidationPolicy(
            name="apiserver-not-public",
            description="No security rule opens the API server port (6443) to the internet.",
            remediation_steps="List the offices' and VPN egress ranges in azure.admin_cidrs instead.",
            validate=_apiserver,
        ),
        StackValidationPolicy(
            name="etcd-isolated",
            description="Only the control-plane subnets reach etcd (2379/2380).",
            remediation_steps="Admit etcd's ports only from the apiservers and etcd subnets.",
            validate=_etcd,
        ),
    ],
)
