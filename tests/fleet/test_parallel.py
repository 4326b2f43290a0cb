"""`skyrack join --parallel`: real racks of the fleet lab at once, one summary, records per rack.

Every real run is followed by one that must report changed=0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import run_cli

from .conftest import RACKS, join

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


def windows(data: dict) -> dict[str, tuple[float, float]]:
    return {r["rack"]: (r["started"], r["ended"]) for r in data["racks"]}


def assert_unchanged(fleet_lab, runs: Path) -> dict:
    """The converged re-run, with what the file says (configs/lab.yaml: join.parallel 2, no canary)."""
    rc, data, err = join(fleet_lab, runs)
    assert rc == 0, err
    assert {h["host"]: h["changed"] for r in data["racks"] for h in r["hosts"]} == \
        {h: 0 for hosts in RACKS.values() for h in hosts}
    assert data["parallel"] == 2 and data["canary"] is False
    w = windows(data)
    assert w["r01"][0] < w["r02"][1] and w["r02"][0] < w["r01"][1], w  # no canary: the first two at once
    return data


def test_racks_run_in_parallel_after_the_canary(fleet_lab, runs):
    rc, data, err = join(fleet_lab, runs, "--parallel", "2", "--canary")
    assert rc == 0, err
    assert data["ok"] is True and data["parallel"] == 2 and data["canary"] is True and data["not_started"] == []
    assert [r["rack"] for r in data["racks"]] == list(RACKS)
    assert all(h["result"] == "ok" and h["changed"] > 0 for r in data["racks"] for h in r["hosts"])
    w = windows(data)
    # the canary ran alone; r02 and r03 ran at the same time
    assert w["r01"][1] <= min(w["r02"][0], w["r03"][0])
    assert w["r02"][0] < w["r03"][1] and w["r03"][0] < w["r02"][1], w
    # records per rack, as a serial run keeps them
    for r in data["racks"]:
        summary = json.loads((Path(r["record"]) / "summary.json").read_text())
        assert summary["rack"] == r["rack"] and summary["ended"] == r["ended"]
    assert_unchanged(fleet_lab, runs)


def test_a_failed_canary_starts_no_other_rack_and_the_retry_converges(fleet_lab, runs):
    assert run_cli("lab", "stop", "r01-n01", str(fleet_lab.env)).returncode == 0
    try:
        rc, data, err = join(fleet_lab, runs, "--parallel", "2", "--canary")
    finally:
        assert run_cli("lab", "up", str(fleet_lab.env), timeout=600).returncode == 0
    assert rc == 1, err
    assert [r["rack"] for r in data["racks"]] == ["r01"]
    assert data["racks"][0]["hosts"][0]["result"] == "unreachable"
    assert data["stopped_by"] == "r01" and data["not_started"] == ["r02", "r03"]
    assert "racks not started: r02, r03" in err
    rc, data, err = join(fleet_lab, runs, "--parallel", "2", "--canary", "--retry-failed")
    assert rc == 0, err
    assert [r["rack"] for r in data["racks"]] == ["r01"]
    assert_unchanged(fleet_lab, runs)
