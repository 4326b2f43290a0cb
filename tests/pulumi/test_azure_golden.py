"""Each stack's resource inputs match tests/pulumi/golden/<stack>.yaml, so a PR shows what changes in Azure."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from pulumi_golden import snapshot
from pulumi_harness import StackRun

from skyrack import config

GOLDEN = Path(__file__).parent / "golden"
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
UPDATE = os.environ.get("SKYRACK_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_resource_inputs_match_the_golden_file(name: str, request: pytest.FixtureRequest) -> None:
    run: StackRun = request.getfixturevalue(name)
    current = snapshot(run)
    path = GOLDEN / f"{name}.yaml"
    if UPDATE:
        path.write_text(current)
        return
    assert path.exists(), f"{path} is missing: run SKYRACK_UPDATE_GOLDEN=1 pytest tests/pulumi"
    expected = path.read_text()
    assert current == expected, (f"{path} differs from what the program registers now; if the change is "
                                 "intended, run SKYRACK_UPDATE_GOLDEN=1 pytest tests/pulumi and commit the diff")


def test_golden_files_hold_no_generated_secret(request: pytest.FixtureRequest) -> None:
    for name in ("dev", "prod"):
        run: StackRun = request.getfixturevalue(name)
        text = snapshot(run)
        assert "PRIVATE KEY" not in text
        # the one certificate a golden file may hold is the site's CA from the environment file (mirrors.ca):
        # public, and the same at every run
        ca = config.load(CONFIGS / f"{name}.yaml").mirrors.ca
        site_ca = "".join(line for line in (ca or "").splitlines() if "-----" not in line)
        bodies = re.findall(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", text, flags=re.S)
        assert all(re.sub(r"\s|\\n", "", body) == site_ca for body in bodies), name
        assert len(bodies) == (0 if ca is None else text.count("ca_certs:")), name
        assert run.outputs["bootstrap_token"] not in text and run.outputs["pool_bootstrap_token"] not in text
        assert run.outputs["vpn_shared_key"] not in text
