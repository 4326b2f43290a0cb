"""Fixtures of the GitOps tests (helpers in gitops_helpers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gitops_helpers import GitRepo


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    """A repository whose main branch holds dev (plus a second rack and team) and lab."""
    r = GitRepo(tmp_path / "repo")
    r.copy("dev")
    r.copy("lab")

    def second_rack(d: dict[str, Any]) -> None:
        d["teams"].append({"name": "vision", "gpu_quota": 16})
        d["racks"].append({"name": "r02", "team": "vision", "gpu": {"model": "H100-SXM5-80GB", "count": 8},
                           "nodes": [{"name": "r02-n01", "ip": "10.64.2.11"}, {"name": "r02-n02", "ip": "10.64.2.12"}]})

    r.edit("dev", second_rack)
    r.commit("base")
    return r
