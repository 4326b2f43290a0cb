"""The layers (docs/ARCHITECTURE.md) hold: core <- edges <- command line, no cycles.

The contracts are import-linter's, in pyproject.toml; `lint-imports` checks them here, so a
violation fails the tests. Each contract is also shown to break on the import it forbids.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT, need


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the package under root/modules, with the contracts of root/pyproject.toml."""
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        need("import-linter (lint-imports) is not installed: ./dev setup installs the dev extras")
    env = {**os.environ, "PYTHONPATH": str(root / "modules")}
    return subprocess.run([str(exe), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("plan.py", "from .azure import context", "The core imports no edge"),
    ("render/cloud_init.py", "import pulumi", "The core imports no edge, no command line, no Pulumi"),
    ("join/driver.py", "from ..cliutil import guarded", "The commands' shared helpers are for the command line only"),
    ("lab/lifecycle.py", "from . import cli", "The command line is on top"),
    ("etcd/ops.py", "import typer", "The edges' engines do not import typer"),
    ("ipam.py", "from . import config", "No cycles"),
], ids=["core-imports-an-edge", "core-imports-pulumi", "engine-imports-cliutil", "engine-imports-a-cli-module",
        "engine-imports-typer", "a-cycle"])
def test_each_contract_breaks_on_what_it_forbids(tmp_path, module, line, contract):
    shutil.copytree(ROOT / "modules" / "skyrack", tmp_path / "modules" / "skyrack",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "modules" / "skyrack" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    broken = proc.stdout.split("Broken contracts", 1)[1]
    assert contract in broken, proc.stdout


def test_the_join_engine_imports_no_command_line():
    code = ('import skyrack.join.driver; import sys; '
            'assert "typer" not in sys.modules and "click" not in sys.modules, '
            '[m for m in sys.modules if m.split(".")[0] in ("typer", "click")][:5]')
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT / "modules")},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
