"""The project's strategy (ansible.cfg: Mitogen's `mitogen_linear`) keeps linear's rules: a batch with more
failed hosts than `max_fail_percentage` allows stops; at or under it, the others go on.

Real ansible-playbook runs with the project's ansible.cfg, on hosts reached with the local connection
(what is tested is the strategy's bookkeeping, not a transport).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from support import local_ansible as ansible

HOSTS = ["h1", "h2", "h3"]


def test_the_project_runs_mitogens_linear_strategy(tmp_path):
    dump = ansible("ansible-config", "dump", "--only-changed", cwd=tmp_path).stdout
    assert "DEFAULT_STRATEGY(" in dump and "= mitogen_linear" in dump.split("DEFAULT_STRATEGY(", 1)[1].split("\n")[0]


def play(tmp_path: Path, failing: list[str]) -> dict[str, dict[str, int]]:
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {
        h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for h in HOSTS}}}))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False, "serial": [3], "max_fail_percentage": 34,  # join.yml's
        "tasks": [
            {"name": "fail where told", "ansible.builtin.command": "false",
             "when": "inventory_hostname in failing", "changed_when": False},
            {"name": "after", "ansible.builtin.command": "true", "changed_when": False}]}]))
    proc = ansible("ansible-playbook", "-i", str(tmp_path / "hosts.yml"), "-e", json.dumps({"failing": failing}),
                   str(tmp_path / "play.yml"), cwd=tmp_path, ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
                   ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    recap = proc.stdout.split("PLAY RECAP", 1)[1]  # "h1 : ok=1 changed=0 unreachable=0 failed=1 ..."
    return {m[1]: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
            for m in re.finditer(r"^(\S+)\s+:\s+(.*)$", recap, re.M)}


@pytest.mark.parametrize(("failing", "after"), [
    (["h1"], {"h2", "h3"}),   # 1 of 3 = 33% <= 34%: the others go on
    (["h1", "h2"], set()),    # 2 of 3 = 67% > 34%: the batch stops, h3 does not run "after"
])
def test_the_projects_strategy_keeps_max_fail_percentage(tmp_path, failing, after):
    stats = play(tmp_path, failing)
    assert {h for h in HOSTS if stats[h]["failed"]} == set(failing)
    # "after" ran where ok counts it: the failing task is skipped (when:) on the others, so ok == 1 means "after"
    assert {h for h in HOSTS if stats[h]["ok"] == 1} == after, stats
