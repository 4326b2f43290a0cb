"""Every user-data the stack ships passes `cloud-init schema` and the top-level key check.

At boot an invalid config is only a warning, so this is where it must be caught. The check is
userdata_check (tests/userdata_check.py: cloud-init from the Debian package, unpacked by `./dev setup`), the
same one the lab's tests use.
"""

from __future__ import annotations

import base64

import pytest
from pulumi_harness import StackRun

import userdata_check


@pytest.fixture(scope="module")
def validate(userdata_checker):
    def check(name: str, text: str) -> None:
        result = userdata_checker.check(name, text)
        assert result.ok, f"{name}: {result.problems}"

    return check


def test_every_vm_user_data_is_valid_cloud_config(stack: StackRun, validate) -> None:
    vms = stack.of_type("compute:VirtualMachine")
    assert vms
    for vm in vms:
        validate(vm.name, base64.b64decode(vm.plain["osProfile"]["customData"]).decode())
    for scale_set in stack.of_type("compute:VirtualMachineScaleSet"):
        validate(scale_set.name, base64.b64decode(scale_set.plain["virtualMachineProfile"]["osProfile"]["customData"]).decode())


def test_the_validator_catches_a_wrong_type_and_an_unknown_top_level_key(validate) -> None:
    assert userdata_check.schema_problems("#cloud-config\nwrite_files:\n  - path: /x\n    defer: 'yes'\n")
    assert userdata_check.top_level_problems("#cloud-config\nwrite_file: []\n")
    with pytest.raises(AssertionError):
        validate("bad", "#cloud-config\nruncmd: 3\n")
