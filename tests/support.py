"""Helpers every test area shares (importable as `support`: pytest puts tests/ on sys.path).

`conftest.py` files are not importable by name once several directories have one, so
shared code lives here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"


def run_cli(*args: str, cwd: Path | None = None, check: bool = False, timeout: float = 600,
            env: dict[str, str] | None = None, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m skyrack ARGS` from this checkout (not whatever is installed)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "modules"), "COLUMNS": "200", "NO_COLOR": "1"}
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "skyrack", *args], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise AssertionError(f"skyrack {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def need(reason: str) -> None:
    """A test's prerequisite is missing: skip on a developer's machine, fail in CI (CI=true).

    CI installs everything through ./dev, so there a missing tool is a broken install step,
    not a reason to pass quietly.
    """
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"prerequisite missing in CI: {reason}")
    pytest.skip(reason)


def is_secret(value: object) -> bool:
    """A value Pulumi's engine would see as secret (its wire form under set_mocks)."""
    from pulumi.runtime import rpc

    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def unwrap(value: object) -> object:
    """The value without Pulumi's secret wrappers, at any depth."""
    if is_secret(value):
        return unwrap(value["value"])  # type: ignore[index]
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


# The pack's policies as it declares them, without serving them: `pulumi_policy` stands in for the SDK, whose
# PolicyPack starts a gRPC server and waits for the engine. Run with `python -I -S`: no site-packages, so the
# pack must find skyrack beside itself, as it does in its own virtualenv.
POLICY_PACK_DECLARED = r"""
import json, runpy, sys, types
sdk = types.ModuleType("pulumi_policy")
declared = []
for name in ("EnforcementLevel", "ReportViolation", "ResourceValidationArgs", "StackValidationArgs"):
    setattr(sdk, name, types.SimpleNamespace(MANDATORY="mandatory"))
sdk.ResourceValidationPolicy = sdk.StackValidationPolicy = lambda **kw: kw["name"]
sdk.PolicyPack = lambda **kw: declared.append((kw["name"], kw["policies"]))
sys.modules["pulumi_policy"] = sdk
runpy.run_path(sys.argv[1], run_name="__main__")
print(json.dumps({"declared": declared, "skyrack": sys.modules["skyrack"].__file__}))
"""


def policy_pack_declared(python: str, pack: Path) -> dict:
    """What the policy pack in `pack` declares, run by `python` with no site-packages, and where it found skyrack."""
    import json

    proc = subprocess.run([python, "-I", "-S", "-c", POLICY_PACK_DECLARED, str(pack / "__main__.py")], cwd=pack.parent,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def rejects(path: Path, *fragments: str, command: str = "validate") -> str:
    """`skyrack <command> PATH` refuses the file: exit 1, no traceback, every fragment in what it says."""
    proc = run_cli(command, str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, f"{fragment!r} not in:\n{proc.stderr}"
    return proc.stderr


def local_ansible(tool: str, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """An Ansible tool (ansible-playbook, ansible-config) with the project's ansible.cfg; 0 or 2 (a host failed)."""
    from skyrack.join.node_files import ANSIBLE_DIR

    proc = subprocess.run([str(Path(sys.executable).parent / tool), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"), **env})
    assert proc.returncode in (0, 2), proc.stdout + proc.stderr
    return proc
