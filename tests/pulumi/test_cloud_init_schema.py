"""Every control-plane user-data passes cloud-init's own schema (strict), as `cloud-init schema` would.

At boot an invalid config is only a warning, so this is where it must be caught. Uses the
Debian cloud-init package unpacked into .cache/cloud-init (never installed): `./dev setup`
does that once the etcd/lab branch is merged (`python -m skyrack.userdata_check`); by hand:
`apt-get download cloud-init && dpkg -x cloud-init_*.deb .cache/cloud-init`.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest
import yaml
from pulumi_harness import StackRun

# cloud-init 22.4 calls jsonschema the old way; the validation itself is unaffected.
pytestmark = pytest.mark.filterwarnings("ignore:Passing a schema to Validator.iter_errors:DeprecationWarning")
CLOUD_INIT = Path(__file__).resolve().parents[2] / ".cache" / "cloud-init" / "usr" / "lib" / "python3" / "dist-packages"


@pytest.fixture(scope="module")
def validate():
    if not (CLOUD_INIT / "cloudinit").is_dir():
        pytest.skip(f"cloud-init is not unpacked in {CLOUD_INIT}")
    sys.path.append(str(CLOUD_INIT))
    from cloudinit.config.schema import get_schema, validate_cloudconfig_schema

    schema = get_schema()

    def check(text: str) -> None:
        assert text.startswith("#cloud-config\n")
        validate_cloudconfig_schema(yaml.safe_load(text), schema, strict=True)

    return check


def test_every_vm_user_data_is_valid_cloud_config(stack: StackRun, validate) -> None:
    vms = stack.of_type("compute:VirtualMachine")
    assert vms
    for vm in vms:
        validate(base64.b64decode(vm.plain["osProfile"]["customData"]).decode())
    for scale_set in stack.of_type("compute:VirtualMachineScaleSet"):
        validate(base64.b64decode(scale_set.plain["virtualMachineProfile"]["osProfile"]["customData"]).decode())


def test_the_validator_catches_a_wrong_type(validate) -> None:
    from cloudinit.config.schema import SchemaValidationError

    with pytest.raises(SchemaValidationError, match="defer"):
        validate("#cloud-config\nwrite_files:\n  - path: /x\n    defer: 'yes'\n")
