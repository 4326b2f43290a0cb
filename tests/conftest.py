"""Shared test helpers: run the real `skyrack` command line in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"


def run_cli(*args: str, cwd: Path | None = None, check: bool = False, timeout: float = 600,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m skyrack ARGS` from this checkout (not whatever is installed)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "modules"), "COLUMNS": "200", "NO_COLOR": "1"}
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "skyrack", *args], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"skyrack {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def env_copy(tmp_path: Path):
    """Copy a shipped environment (and its lock) into tmp_path/configs; returns its path."""

    def _copy(name: str) -> Path:
        dest = tmp_path / "configs"
        dest.mkdir(exist_ok=True)
        for suffix in (".yaml", ".lock.yaml"):
            src = CONFIGS / f"{name}{suffix}"
            if src.exists():
                shutil.copy(src, dest / src.name)
        return dest / f"{name}.yaml"

    return _copy
