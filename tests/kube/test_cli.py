"""`skyrack kube ...` from the command line, and the golden files that make a change reviewable.

Regenerate the golden files after an intended change with
``SKYRACK_UPDATE_GOLDEN=1 python -m pytest tests/kube/test_cli.py`` and review their diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from skyrack import plan as planmod
from skyrack.kube.cli import placeholder_manifests
from support import run_cli

from .conftest import CONFIGS, NOW

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("env", ["lab", "dev"])
def test_manifests_match_the_reviewed_golden_file(env):
    groups = placeholder_manifests(planmod.make(CONFIGS / f"{env}.yaml"), NOW)
    text = yaml.safe_dump_all([m for ms in groups.values() for m in ms], sort_keys=False, width=200)
    golden = GOLDEN / f"{env}.yaml"
    if os.environ.get("SKYRACK_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden} is out of date: rerun with SKYRACK_UPDATE_GOLDEN=1, review the diff"


def test_manifests_command_prints_every_object_and_a_summary():
    proc = run_cli("kube", "manifests", str(CONFIGS / "dev.yaml"), "--json", check=True)
    groups = json.loads(proc.stdout)
    assert groups.pop("ok") is True
    assert set(groups) == {"Bootstrap", "Batch", "Gpu", "Monitoring", "Autoscaler", "CloudPools"}
    count = sum(len(v) for v in groups.values())
    assert proc.stderr.startswith(f"dev: {count} objects in 6 concerns")
    assert "<secret>" in json.dumps(groups["Bootstrap"])  # placeholders, never a real token


def test_scheduler_config_command_prints_what_cloud_init_embeds():
    from skyrack import config, scheduler

    proc = run_cli("kube", "scheduler-config", str(CONFIGS / "prod.yaml"), "--kubeconfig", "/etc/k/s.conf",
                   check=True)
    assert proc.stdout == scheduler.scheduler_config_yaml(config.load(CONFIGS / "prod.yaml"), "/etc/k/s.conf")


def test_a_bad_environment_file_is_one_clear_line_and_exit_1(env_copy):
    path = env_copy("dev")
    path.write_text(path.read_text().replace("max_scale_down_share: 0.1", "max_scale_down_share: 0.9"))
    proc = run_cli("kube", "manifests", str(path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{path}: cluster.autoscaler.max_scale_down_share: Input should be less than or equal to 0.5" in proc.stderr
