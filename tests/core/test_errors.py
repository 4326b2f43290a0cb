"""Every command reports bad input the same way: exit 1, `file: field: message`, nothing else, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import run_cli

COMMANDS = [["validate"], ["plan"], ["inventory"], ["check"], ["join"], ["lab", "up"], ["etcd", "status"],
            ["kube", "manifests"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_typo_in_the_environment_file(tmp_path: Path, command: list[str]) -> None:
    env = tmp_path / "dev.yaml"
    env.write_text('name: dev\nazure: {location: westus2, vnet_cidr: 10.0.0.0/16}\n'
                   'kubernetes: {version: "1.31.2", pod_cidr: 10.128.0.0/10, pods_per_nod: 32}\n'
                   'onprem: {cidrs: [10.64.0.0/14]}\n')
    proc = run_cli(*command, str(env))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"error {env}: kubernetes.pods_per_nod: unknown key (did you mean 'pods_per_node'?)"]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_missing_environment_file(tmp_path: Path, command: list[str]) -> None:
    proc = run_cli(*command, str(tmp_path / "nope.yaml"))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"error {tmp_path / 'nope.yaml'}: no such file"]
