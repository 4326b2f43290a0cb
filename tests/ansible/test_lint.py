"""ansible-lint with the production profile on ansible/ (the profile is set in ansible/.ansible-lint)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from support import ROOT


def test_ansible_lint_production_profile_passes():
    lint = shutil.which("ansible-lint", path=str(Path(sys.executable).parent)) or "ansible-lint"
    proc = subprocess.run([lint, "--profile", "production"], cwd=ROOT / "ansible", capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Profile 'production' was required, and it passed" in proc.stderr + proc.stdout
