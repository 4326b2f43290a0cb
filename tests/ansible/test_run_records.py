"""Run records are kept to `--keep-runs` per rack: the oldest go first, the run just made never."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyrack.join import records


def record(runs: Path, name: str, env: str, rack: str, summary: bool = True) -> Path:
    d = runs / name
    (d / "artifacts").mkdir(parents=True)
    if summary:
        (d / "summary.json").write_text(json.dumps({"env": env, "rack": rack, "check": False, "failed_hosts": []}))
    return d


@pytest.fixture
def runs(tmp_path) -> Path:
    runs = tmp_path / "runs"
    (runs / ".facts/lab").mkdir(parents=True)
    return runs


def test_the_oldest_records_of_the_rack_go_first(runs):
    names = ["20261201T100000-lab-r01", "20261201T110000-lab-r01", "20261201T110000-lab-r01.2",
             "20261201T110000-lab-r01.10", "20261201T120000-lab-r01"]
    made = [record(runs, n, "lab", "r01") for n in names]
    others = [record(runs, "20261201T090000-lab-r010", "lab", "r010"),  # another rack whose name starts the same
              record(runs, "20261201T090000-lab-x-r01", "lab-x", "r01"),  # another environment
              record(runs, "20261201T090000-lab-r01-x", "lab", "r01-x")]
    assert records.rack_records(runs, "lab", "r01") == made  # .10 after .2: by number, not text
    gone = records.prune(runs, "lab", "r01", 2, current=made[-1])
    assert gone == made[:3]
    assert [d.exists() for d in made] == [False, False, False, True, True]
    assert all(d.exists() for d in others) and (runs / ".facts/lab").is_dir()


def test_the_current_run_is_kept_even_when_it_is_not_the_newest_name(runs):
    current = record(runs, "20261201T080000-lab-r01", "lab", "r01")  # a clock set back
    newer = record(runs, "20261201T120000-lab-r01", "lab", "r01")
    assert records.prune(runs, "lab", "r01", 1, current=current) == [newer]
    assert current.exists()


def test_a_record_whose_summary_names_another_rack_is_not_this_racks(runs):
    # env "lab", rack "x-r01" and env "lab-x", rack "r01" make the same directory name
    theirs = record(runs, "20261201T100000-lab-x-r01", "lab-x", "r01")
    mine = record(runs, "20261201T110000-lab-x-r01", "lab", "x-r01")
    interrupted = record(runs, "20261201T105000-lab-x-r01", "lab", "x-r01", summary=False)
    assert records.rack_records(runs, "lab", "x-r01") == [interrupted, mine]
    assert records.rack_records(runs, "lab-x", "r01")[0] == theirs
    assert records.prune(runs, "lab", "x-r01", 1, current=mine) == [interrupted]
    assert theirs.exists()


def test_retry_reads_the_newest_real_run(runs):
    record(runs, "20261201T100000-lab-r01", "lab", "r01")
    newest = record(runs, "20261201T100000-lab-r01.10", "lab", "r01")
    (newest / "summary.json").write_text(json.dumps({"env": "lab", "rack": "r01", "check": False,
                                                     "failed_hosts": ["r01-n02"]}))
    check = record(runs, "20261201T110000-lab-r01", "lab", "r01")
    (check / "summary.json").write_text(json.dumps({"env": "lab", "rack": "r01", "check": True, "failed_hosts": []}))
    assert records.latest(runs, "lab", "r01")["failed_hosts"] == ["r01-n02"]
