"""Each stack's resource inputs match tests/pulumi/golden/<stack>.yaml, so a PR shows what changes in Azure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pulumi_golden import snapshot
from pulumi_harness import StackRun

GOLDEN = Path(__file__).parent / "golden"
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
        assert "PRIVATE KEY" not in text and "BEGIN CERTIFICATE" not in text
        assert run.outputs["bootstrap_token"] not in text and run.outputs["pool_bootstrap_token"] not in text
        assert run.outputs["vpn_shared_key"] not in text
