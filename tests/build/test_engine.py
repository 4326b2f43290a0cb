"""The workspace the built Pulumi runs in: private, offline, its secrets never in its environment."""

from __future__ import annotations

import stat
from pathlib import Path

from skyrack.build.pulumi import Engine
from skyrack.engine import Workspace, explain
from skyrack.upstream import PULUMI


def workspace(tmp_path: Path) -> Workspace:
    return Workspace(Engine(PULUMI, (tmp_path / "cli", tmp_path / "lang", tmp_path / "k8s")), tmp_path / "ws").create()


def test_a_workspace_is_private_and_its_passphrase_stays_in_its_file(tmp_path):
    ws = workspace(tmp_path)
    secret = ws.passphrase_file.read_text().strip()
    assert len(secret) >= 40
    assert stat.S_IMODE(ws.passphrase_file.stat().st_mode) == 0o600
    for d in (ws.root, ws.backend, ws.root / "home", ws.root / "config"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    env = ws.env()
    assert secret not in "".join(env.values()) and secret not in ws.exports()
    assert env["PULUMI_CONFIG_PASSPHRASE_FILE"] == str(ws.passphrase_file)
    assert env["PULUMI_BACKEND_URL"] == f"file://{ws.backend}"
    assert env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] == env["PULUMI_SKIP_UPDATE_CHECK"] == "true"
    assert env["PATH"].split(":")[:3] == [str(tmp_path / "cli"), str(tmp_path / "lang"), str(tmp_path / "k8s")]
    assert workspace(tmp_path).passphrase_file.read_text().strip() == secret  # created once


def test_exports_are_quoted_for_the_shell(tmp_path):
    ws = Workspace(workspace(tmp_path).engine, tmp_path / "a dir; rm -rf x").create()
    assert f"export PULUMI_HOME='{ws.root}/home'" in ws.exports()


def test_a_failure_is_explained_by_pulumis_error_lines(tmp_path):
    ws = workspace(tmp_path)
    out = ("Updating (lab):\n     Type  Name\n  pulumi:pulumi:Stack  skyrack-cluster-lab  **failed**\n"
           "Diagnostics:\n  pulumi:pulumi:Stack (skyrack-cluster-lab):\n"
           "    error: API servers at https://198.18.1.10:6443 not ready after 60s (7 attempts, last: refused)\n"
           "    error: update failed\n")
    assert explain(out, ws, "lab") == "API servers at https://198.18.1.10:6443 not ready after 60s (7 attempts, last: refused)"
    why = explain("error: getting secrets manager: incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE", ws, "lab")
    assert str(ws.passphrase_file) in why and "does not open stack lab" in why
    assert explain("something odd\nlast line", ws, "lab") == "last line"
