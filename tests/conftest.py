"""Fixtures every test area shares; plain helpers are in support.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from support import CONFIGS, ROOT, need, run_cli

__all__ = ["CONFIGS", "ROOT", "run_cli"]


@pytest.fixture
def env_copy(tmp_path: Path):
    """Copy a shipped environment (and its lock) into tmp_path/configs; returns its path."""

    def _copy(name: str) -> Path:
        dest = tmp_path / "configs"
        dest.mkdir(exist_ok=True)
        for suffix in (".yaml", ".lock.yaml", "-site-ca.pem"):  # prod names its site CA beside it
            src = CONFIGS / f"{name}{suffix}"
            if src.exists():
                shutil.copy(src, dest / src.name)
        return dest / f"{name}.yaml"

    return _copy


@pytest.fixture(scope="session")
def userdata_checker():
    """userdata_check (tests/userdata_check.py) with cloud-init available (`cloud-init schema` + the top-level key check)."""
    import userdata_check

    try:
        userdata_check.cloud_init_root()
    except userdata_check.CloudInitUnavailable as exc:
        need(str(exc))
    return userdata_check
