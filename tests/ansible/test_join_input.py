"""Bad input to `skyrack join` is refused with `file: field: what is wrong`, exit 1, before any host is touched."""

from __future__ import annotations

import json

from skyrack.lab import variants
from support import CONFIGS, run_cli


def test_invalid_environment(env_copy, tmp_path):
    env = env_copy("lab")
    env.write_text(env.read_text().replace("pods_per_node: 32", "pods_per_node: 3"))
    proc = run_cli("join", str(env), "--runs-dir", str(tmp_path / "runs"))
    assert proc.returncode == 1
    assert f"{env}: kubernetes.pods_per_node:" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists(), "a refused run leaves no record"


def test_outputs_that_break_the_contract(env_copy, tmp_path):
    bad = tmp_path / "outputs.json"
    bad.write_text(json.dumps({"apiserver_endpoint": "198.18.0.36", "ca_cert_hash": "sha256:" + "a" * 64,
                               "bootstrap_token": "[secret]"}))
    proc = run_cli("join", str(env_copy("lab")), "--outputs", str(bad), "--runs-dir", str(tmp_path / "runs"))
    assert proc.returncode == 1
    assert f"{bad}: apiserver_endpoint: expected https://<address>:<port> (got '198.18.0.36')" in proc.stderr
    assert f"{bad}: bootstrap_token: is hidden" in proc.stderr


def test_a_lab_that_is_not_up(tmp_path):
    env = variants.make(CONFIGS / "lab.yaml", tmp_path / "env", "skyrackt9", 9)
    proc = run_cli("join", str(env), "--runs-dir", str(tmp_path / "runs"))
    assert proc.returncode == 1
    assert f"{env}: lab: the lab is not up: run `skyrack lab up {env}` first" in proc.stderr
