"""The Pulumi program in stacks/cluster: reads the control-plane stack of the same name and
builds the layer from the environment file named like the stack."""

from __future__ import annotations

import runpy
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pytest

from support import is_secret

from .conftest import POOL_TOKEN, TOKEN, Recorder, admin_kubeconfig, run_program

PROGRAM = Path(__file__).resolve().parents[2] / "stacks" / "cluster" / "__main__.py"


@dataclass
class WithControlPlaneStack(Recorder):
    """Answers StackReference reads with the outputs the Azure control-plane stack exports."""

    outputs: dict = field(default_factory=dict)
    references: list[str] = field(default_factory=list)

    def new_resource(self, args):
        if args.typ == "pulumi:pulumi:StackReference":
            self.references.append(args.inputs["name"])
            return args.name, {"name": args.inputs["name"], "outputs": self.outputs,
                               "secretOutputNames": ["bootstrap_token", "admin_kubeconfig"]}
        return super().new_resource(args)


def control_plane_stack(ca, endpoint: str) -> dict:
    return {"apiserver_endpoint": endpoint, "ca_cert_pem": ca.cert_pem, "ca_cert_hash": ca.hash,
            "bootstrap_token": TOKEN, "pool_bootstrap_token": POOL_TOKEN,
            "admin_kubeconfig": admin_kubeconfig(ca, endpoint),
            "etcd_endpoints": ["https://10.0.2.4:2379"], "resource_group": "skyrack-dev"}


@pytest.fixture(autouse=True)
def _no_config():
    pulumi.runtime.set_all_config({})
    yield
    pulumi.runtime.set_all_config({})


def test_the_program_reads_the_same_named_control_plane_stack(ca):
    rec = WithControlPlaneStack(outputs=control_plane_stack(ca, "https://10.0.1.4:6443"))
    res = run_program("dev", lambda: runpy.run_path(str(PROGRAM)), preview=True, rec=rec)
    assert rec.references == ["acme/skyrack/dev"]
    cluster_info = next(r for r in res if r.name == "configmap-kube-public-cluster-info")
    assert "https://10.0.1.4:6443" in cluster_info.manifest["data"]["kubeconfig"]
    provider = next(r for r in res if r.typ == "pulumi:providers:kubernetes")
    assert is_secret(provider.inputs["kubeconfig"])
    creds = next(r for r in res if r.name == "secret-kube-system-cluster-autoscaler-azure")
    assert creds.manifest["stringData"] == {"ARM_VM_TYPE": "vmss", "ARM_RESOURCE_GROUP": "skyrack-dev"}


def test_the_control_plane_stack_can_be_named_in_config(ca):
    pulumi.runtime.set_config("skyrack-cluster:controlPlaneStack", "lab-org/skyrack/dev-eu")
    rec = WithControlPlaneStack(outputs=control_plane_stack(ca, "https://10.0.1.4:6443"))
    run_program("dev", lambda: runpy.run_path(str(PROGRAM)), preview=True, rec=rec)
    assert rec.references == ["lab-org/skyrack/dev-eu"]


def test_a_stack_without_an_environment_file_fails_with_the_files_name(ca):
    rec = WithControlPlaneStack(outputs=control_plane_stack(ca, "https://10.0.1.4:6443"))
    with pytest.raises(Exception, match=r"configs/staging\.yaml: no such file"):
        run_program("staging", lambda: runpy.run_path(str(PROGRAM)), preview=True, rec=rec)
