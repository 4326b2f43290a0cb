"""Bad input to `skyrack join` is refused with `file: field: what is wrong`, exit 1, before any host is touched."""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path

import yaml

import lab_variants as variants
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


# ----------------------------------------------------------------------------- secrets and records (no hosts needed)

SECRET_OUTPUTS = {"bootstrap_token": "abcdef.0123456789abcdef", "admin_kubeconfig": "apiVersion: v1\nkind: Config\n",
                  "vpn_shared_key": "pre-shared-key-42", "admin_ssh_private_key": "-----BEGIN PRIVATE KEY-----\nQQ\n"}
PUBLIC_OUTPUTS = {"apiserver_endpoint": "https://198.18.0.36:6443", "ca_cert_hash": "sha256:" + "0f" * 32}


def test_secrets_come_from_the_contract_not_their_names():
    from skyrack.join import outputs

    public, secret = outputs.split_secrets(outputs.check({**PUBLIC_OUTPUTS, **SECRET_OUTPUTS}, Path("o.json")))
    assert public == PUBLIC_OUTPUTS
    assert secret == {"skyrack_cp_bootstrap_token": SECRET_OUTPUTS["bootstrap_token"]}, \
        "only the secret the join uses reaches Ansible; the kubeconfig and the VPN key do not"


def test_run_records_are_private_and_hold_no_secret(tmp_path):
    from skyrack import plan as planmod
    from skyrack.join import driver, outputs, records

    runs = tmp_path / "runs"
    run_dir = records.new_dir(runs, "lab", "r01")
    public, secret = outputs.split_secrets({**PUBLIC_OUTPUTS, **SECRET_OUTPUTS})
    inv = driver.write_inventory(run_dir, planmod.make(CONFIGS / "dev.yaml"), public)
    run = records.RackRun(env="lab", rack="r01", check=False, record=str(run_dir), started=0.0)
    records.save(run)
    with driver.secret_vars(secret) as args:
        secrets_file = Path(args[1][1:])
        assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(secrets_file.parent.stat().st_mode) == 0o700
        assert yaml.safe_load(secrets_file.read_text()) == secret
    assert not secrets_file.exists(), "the secrets file lives only for the run"
    for d in (runs, run_dir, inv.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in (inv, run_dir / "summary.json"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    text = "".join(p.read_text() for p in run_dir.rglob("*") if p.is_file())
    for value in SECRET_OUTPUTS.values():
        assert value not in text
    assert PUBLIC_OUTPUTS["ca_cert_hash"] in inv.read_text()


def test_progress_prints_remote_text_as_text():
    """A message from a host (or a task name) with Rich markup or escape sequences is shown, not interpreted."""
    from rich.console import Console

    from skyrack.join.progress import Progress, error_lines, summary_table
    from skyrack.join.records import HostResult, RackRun

    buf = io.StringIO()
    console = Console(file=buf, width=200, force_terminal=False)
    with Progress(console, "r01", ["n1"]) as progress:
        progress.event({"event": "runner_on_failed", "event_data": {
            "host": "n1", "task": "[/]task", "res": {"msg": "[bold]boom[/] \x1b[2J"}}})
    run = RackRun(env="lab", rack="r01", check=False, record="x", started=0.0,
                  hosts=[HostResult(host="n1", rack="r01", result="failed", message="[/] \x1b]0;title\x07")])
    console.print(summary_table([run]))
    for line in error_lines([run]):
        console.print(f"[red]{line}[/red]")
    shown = buf.getvalue()
    assert "[/]task: [bold]boom[/] \\x1b[2J" in shown
    assert "n1: failed: [/] \\x1b]0;title\\x07" in shown
    assert "\x1b" not in shown and "\x07" not in shown


def test_paths_handed_to_ansible_cannot_be_templates(tmp_path):
    env = variants.make(CONFIGS / "lab.yaml", tmp_path / "env", "skyrackt9", 9)
    runs = tmp_path / "{{ lookup('pipe', 'id') }}"
    proc = run_cli("join", str(env), "--runs-dir", str(runs))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "--runs-dir: a path Ansible is given may not contain '{'" in proc.stderr
    assert not runs.exists()
