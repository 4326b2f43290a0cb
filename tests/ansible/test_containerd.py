"""containerd's configuration as the container_runtime role renders it: the role's own variables
evaluated for a host's facts, then the shared template (templates/node/) the API servers get too."""

from __future__ import annotations

import tomllib

import jinja2
import pytest
import yaml

from skyrack.render import render
from support import ROOT

ROLE = ROOT / "ansible/roles/container_runtime"


def role_config(facts: dict) -> dict:
    """The role's `Configure containerd` task: its vars evaluated as Ansible would, the template rendered."""
    task = next(t for t in yaml.safe_load((ROLE / "tasks/main.yml").read_text())
                if t["name"].startswith("Configure containerd"))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    ctx = {"skyrack_host": facts, "container_runtime_root": "/data/containerd",
           "container_runtime_sandbox_image": "registry.k8s.io/pause:3.10.2",
           "container_runtime_max_concurrent_downloads": 10, "container_runtime_cni_bin_dir": "/usr/lib/cni"}
    values = {}
    for key, expr in task["vars"].items():
        out = env.from_string(expr).render(**ctx)
        values[key] = {"True": True, "False": False}.get(out, out)
    return tomllib.loads(render("node/containerd-config.toml.j2", **values))


RUNTIME, IMAGES = "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"  # containerd 2's config version 3


@pytest.mark.parametrize(("gpus", "runtime"), [(8, "nvidia"), (0, "runc")])
def test_gpu_nodes_run_the_nvidia_runtime_by_default(gpus, runtime):
    config = role_config({"nvidia_gpus": gpus, "can_lower_oom_score": True})
    assert config["version"] == 3
    cri = config["plugins"][RUNTIME]
    assert cri["containerd"]["default_runtime_name"] == runtime
    if gpus:
        nvidia = cri["containerd"]["runtimes"]["nvidia"]
        assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
        assert nvidia["options"]["SystemdCgroup"] is True
    else:
        assert "nvidia" not in cri["containerd"]["runtimes"]


@pytest.mark.parametrize("can_lower", [True, False])
def test_oom_score_restriction_follows_the_hosts_capabilities(can_lower):
    plugins = role_config({"nvidia_gpus": 0, "can_lower_oom_score": can_lower})["plugins"]
    assert plugins[RUNTIME]["restrict_oom_score_adj"] is (not can_lower)
    assert plugins[IMAGES]["registry"]["config_path"] == "/etc/containerd/certs.d"
    assert plugins[IMAGES]["pinned_images"]["sandbox"] == "registry.k8s.io/pause:3.10.2"
    assert plugins[RUNTIME]["cni"]["bin_dirs"] == ["/usr/lib/cni"]
    assert plugins["io.containerd.transfer.v1.local"]["max_concurrent_downloads"] == 10


def test_a_changed_config_restarts_containerd():
    tasks = yaml.safe_load((ROLE / "tasks/main.yml").read_text())
    configure = next(t for t in tasks if t["name"].startswith("Configure containerd"))
    handlers = yaml.safe_load((ROLE / "handlers/main.yml").read_text())
    assert configure["notify"] == "Restart containerd"
    assert any(h["name"] == "Restart containerd" and h["ansible.builtin.systemd_service"]["state"] == "restarted"
               for h in handlers)
