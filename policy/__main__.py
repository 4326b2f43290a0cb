"""skyrack's Pulumi policy pack: `pulumi preview --policy-pack policy`.

Wiring only. The checks are `skyrack.policies.azure` (Azure resources turned into
grants) on top of `skyrack.policies.rules`, the same rule functions `skyrack check`
applies to the plan; both are tested without the Pulumi CLI in tests/gitops/.
"""

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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "modules"))

from skyrack.policies import azure


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
