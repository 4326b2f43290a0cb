"""The nvidia role's container-toolkit settings (roles/nvidia/tasks/toolkit.yml), run for real by
ansible-playbook with the project's ansible.cfg on the local connection, against a copy of the
toolkit's configuration as its package installs it and against one that lacks the keys entirely.
(The lab has no GPU: what the settings do inside nvidia-container-runtime is NVIDIA's documented
behaviour; what is tested here is that every GPU node ends up holding them, at the top level of the
TOML, and that a second run changes nothing.)"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from support import local_ansible

# /etc/nvidia-container-runtime/config.toml as nvidia-container-toolkit 1.17 installs it (`nvidia-ctk config
# default`), abridged to its top level and the first sections: the two keys skyrack sets are commented defaults
PACKAGED = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig"
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-ctk]
path = "nvidia-ctk"
"""
WITHOUT_THE_KEYS = "\n".join(line for line in PACKAGED.splitlines() if "accept-nvidia" not in line) + "\n"


def converge(tmp_path: Path, config: Path) -> dict[str, int]:
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"gpu-node": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "tasks": [{"ansible.builtin.include_role": {"name": "nvidia", "tasks_from": "toolkit"},
                   "vars": {"nvidia_toolkit_config": str(config)}}]}]))
    proc = local_ansible("ansible-playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
                         cwd=tmp_path, ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
                         ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recap = proc.stdout.split("PLAY RECAP", 1)[1]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap)}


@pytest.mark.parametrize("installed", [PACKAGED, WITHOUT_THE_KEYS], ids=["as-packaged", "keys-missing"])
def test_gpu_nodes_accept_gpus_only_as_the_device_plugin_mounts_them(tmp_path, installed):
    config = tmp_path / "config.toml"
    config.write_text(installed)
    assert converge(tmp_path, config)["changed"] == 1
    toml = tomllib.loads(config.read_text())
    assert toml["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False  # top level, not in a section
    assert toml["accept-nvidia-visible-devices-as-volume-mounts"] is True
    assert toml["nvidia-container-runtime"] == tomllib.loads(PACKAGED)["nvidia-container-runtime"]  # the rest kept
    assert "accept-nvidia" not in str(toml["nvidia-ctk"])
    before = config.read_text()
    assert converge(tmp_path, config)["changed"] == 0
    assert config.read_text() == before
