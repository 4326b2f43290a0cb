"""`skyrack diff` sees code changes: a scratch repository holding this checkout's code (modules/,
ansible/, stacks/) and the dev and lab environments; a pull-request-like branch changes a
template, a role, the IPAM code or an environment file, and each environment gets the verdict
that change deserves. Each revision is derived by its own code (a subprocess over a copy of
the revision), so these run the real derivation at both revisions."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gitops_helpers import GitRepo, only

from support import ROOT, run_cli

CODE = ("modules", "ansible", "stacks", "Pulumi.yaml")


def _tracked(*paths: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.split("\0") if p and ((ROOT / p).is_file() or (ROOT / p).is_symlink())]


@pytest.fixture
def code_repo(tmp_path: Path) -> GitRepo:
    """main: this checkout's code and configs/dev + lab (with their stack settings); HEAD on branch pr."""
    r = GitRepo(tmp_path / "repo")
    for rel in _tracked(*CODE):
        (r.root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, r.root / rel, follow_symlinks=False)  # modules/skyrack/ansible -> ../../ansible
    for name in ("dev", "lab"):
        r.copy(name)
    shutil.copy(ROOT / "configs/Pulumi.dev.yaml", r.configs / "Pulumi.dev.yaml")
    r.commit("base")
    r.git("checkout", "-q", "-b", "pr")
    return r


def diff(r: GitRepo, *args: str, code_of: Path = ROOT) -> tuple[int, dict[str, Any]]:
    proc = run_cli("diff", "main", *args, "--format", "json", cwd=r.root,
                   env={"PYTHONPATH": str(code_of / "modules")})
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def verdicts(data: dict[str, Any]) -> dict[str, tuple[str, list[tuple[str, str, str]]]]:
    """env -> (status, [(risk, area, message)])."""
    return {e["name"]: (e["status"], [(c["risk"], c["area"], c["message"]) for c in e["changes"]])
            for e in data["environments"]}


def edit(r: GitRepo, rel: str, fn: Callable[[str], str]) -> None:
    path = r.root / rel
    new = fn(path.read_text())
    assert new != path.read_text(), f"the edit of {rel} changed nothing"
    path.write_text(new)


def one(changes: list[tuple[str, str, str]], text: str) -> tuple[str, str, str]:
    hits = [c for c in changes if text in c[2]]
    assert len(hits) == 1, f"{text!r} once in {changes}"
    return hits[0]


def test_a_template_change_is_caution_for_every_environment_with_those_vms(code_repo: GitRepo):
    edit(code_repo, "modules/skyrack/templates/cloud-init/etcd.service.j2",
         lambda t: t.replace("LimitNOFILE=65536", "LimitNOFILE=131072"))
    code_repo.commit("etcd: more file descriptors")
    rc, data = diff(code_repo, "pr")
    assert rc == 0 and data["code_changes"] == ["modules/skyrack/templates/cloud-init/etcd.service.j2"]
    for env in ("dev", "lab"):
        status, changes = verdicts(data)[env]
        assert status == "modified"
        assert one(changes, "etcd user-data changes (etcd-0, etcd-1, etcd-2; 6 line(s))")[:2] == ("caution", "user-data")
        assert all(c[1] == "user-data" for c in changes), changes  # nothing else derives differently
    assert data["summary"]["danger"] == 0


RUN = "on their next rack run (`skyrack join`, the rack workflow)"


@pytest.mark.parametrize(("rel", "change", "dev_says", "lab_says"), [
    pytest.param("modules/skyrack/templates/join/kubelet-config.yaml.j2",
                 lambda t: t.replace("serializeImagePulls: false",
                                     "serializeImagePulls: false\nimageGCHighThresholdPercent: 80"),
                 f"kubelet-config.yaml changes on the nodes of 1 rack(s) (r01): kubelets restart {RUN}",
                 "kubelet-config.yaml changes on the nodes of 2 rack(s) (r01, r02)", id="a join template"),
    pytest.param("ansible/roles/kubelet/tasks/main.yml",
                 lambda t: t + "\n- name: Kubelet is enabled\n  ansible.builtin.systemd_service:\n"
                               "    name: kubelet\n    enabled: true\n",
                 f"role(s) kubelet change (ansible/roles/kubelet/tasks/main.yml): every node of 1 rack(s), "
                 f"4 node(s) gets them {RUN}",
                 "role(s) kubelet change (ansible/roles/kubelet/tasks/main.yml)", id="a role"),
])
def test_a_rack_run_change_is_caution_for_every_environment_with_racks(code_repo: GitRepo, rel: str, change,
                                                                       dev_says: str, lab_says: str):
    edit(code_repo, rel, change)
    code_repo.commit("the rack run changes")
    rc, data = diff(code_repo, "pr")
    assert rc == 0
    got = verdicts(data)
    assert got["dev"] == ("modified", [("caution", "racks", dev_says)])  # nothing else
    assert got["lab"][0] == "modified" and one(got["lab"][1], lab_says)[0] == "caution"


def test_an_ipam_change_that_moves_etcd_is_danger_everywhere(code_repo: GitRepo):
    edit(code_repo, "modules/skyrack/ipam.py", lambda t: t.replace('("apiservers", 28)', '("apiservers", 27)'))
    code_repo.commit("room for more API servers")
    rc, data = diff(code_repo, "pr")
    assert rc == 1 and data["ok"] is False
    got = verdicts(data)
    for env in ("dev", "lab"):
        status, changes = got[env]
        assert status == "modified"
        moved = one(changes, "subnet etcd ")
        assert moved[0] == "danger" and "its VMs are re-created with new addresses" in moved[2]
        assert one(changes, "etcd members re-addressed (etcd-0 ")[0] == "danger"
        assert one(changes, "etcd user-data changes")[0] == "caution"  # the members' own addresses and peers
    dev = got["dev"][1]
    assert one(dev, "API endpoint https://")[0] == "danger"  # the load balancer takes the subnet's last address


def test_an_environment_file_change_concerns_that_environment_only(code_repo: GitRepo):
    code_repo.edit("dev", lambda d: d["racks"][0]["nodes"].append({"name": "r01-n05", "ip": "10.67.0.15"}))
    code_repo.commit("one more node")
    rc, data = diff(code_repo, "pr")
    assert rc == 0 and data["code_changes"] == []
    got = verdicts(data)
    assert got["lab"] == ("unchanged", [])
    status, changes = got["dev"]
    assert status == "modified"
    assert one(changes, "rack r01: 1 node added")[:2] == ("info", "nodes")
    assert all(c[0] != "danger" for c in changes)


def test_working_tree_with_its_own_code_and_a_base_that_predates_the_derivation(code_repo: GitRepo):
    """Head is the working tree, run by its own (loaded) code in-process; main lacks derive.py (the first
    pull request after this feature): main is derived by a copy of it over main's code."""
    code_repo.git("checkout", "-q", "main")
    code_repo.git("rm", "-q", "modules/skyrack/gitops/derive.py")
    code_repo.commit("before derive.py")
    code_repo.git("checkout", "-q", "pr")
    code_repo.git("reset", "-q", "--hard", "main")
    shutil.copy(ROOT / "modules/skyrack/gitops/derive.py", code_repo.root / "modules/skyrack/gitops/derive.py")
    rc, data = diff(code_repo, code_of=code_repo.root)  # only derive.py added: nothing derives differently
    assert rc == 0 and data["code_changes"] == ["modules/skyrack/gitops/derive.py"], data
    assert {e["status"] for e in data["environments"]} == {"unchanged"}
    edit(code_repo, "modules/skyrack/ipam.py", lambda t: t.replace('("apiservers", 28)', '("apiservers", 27)'))
    rc, data = diff(code_repo, code_of=code_repo.root)
    assert rc == 1 and one(verdicts(data)["dev"][1], "subnet etcd ")[0] == "danger"


def test_a_base_from_before_the_join_renderers_rename_derives_its_racks(code_repo: GitRepo):
    """main still calls it join/render.py (derive.py, copied over main's code, imports either name)."""
    code_repo.git("checkout", "-q", "main")
    code_repo.git("mv", "modules/skyrack/join/node_files.py", "modules/skyrack/join/render.py")
    code_repo.commit("before the rename")
    code_repo.git("checkout", "-q", "pr")
    code_repo.git("merge", "-q", "--no-edit", "-s", "ours", "main")  # pr keeps node_files.py
    rc, data = diff(code_repo)
    assert rc == 0 and {e["status"] for e in data["environments"]} == {"unchanged"}, verdicts(data)


def test_a_revision_whose_derivation_crashes_is_reported_not_hidden(code_repo: GitRepo):
    edit(code_repo, "modules/skyrack/plan.py", lambda t: t + "\nraise SystemExit('broken on purpose')\n")
    code_repo.commit("broken plan module")
    _, data = diff(code_repo, "pr")
    for env in ("dev", "lab"):
        status, changes = verdicts(data)[env]
        assert status == "modified"
        assert one(changes, "could not derive at head: the derivation of pr failed")[0] == "caution"



def test_stack_settings_are_compared_and_a_secret_never_shown(repo: GitRepo):
    """An environments-only repository (derived in-process by the installed code): only configs/Pulumi.dev.yaml
    changes; the API servers' and the etcd members' user-data follow the repository it names."""
    settings = repo.configs / "Pulumi.dev.yaml"
    settings.write_text("config:\n  skyrack:kubernetesAptRepo: https://pkgs.k8s.io/core:/stable:/v1.31/deb/\n")
    repo.commit("dev's apt repository")
    settings.write_text("config:\n  skyrack:kubernetesAptRepo: https://mirror.example.org/k8s/v1.31/deb/\n"
                        "  skyrack:vpnSharedKey:\n    secure: v1:c2VjcmV0LWNpcGhlcnRleHQ=\n")
    report = repo.diff("HEAD")
    (dev,) = [e for e in report.envs if e.name == "dev"]
    assert dev.status == "modified" and dev.stack
    got = sorted((c.risk, c.message) for c in dev.changes)
    assert got == [
        ("caution", "apiserver user-data changes (apiserver-0, apiserver-1, apiserver-2; 18 line(s)): running VMs "
                    "keep what they booted with (ignore_changes); each boots with it when replaced (`pulumi up "
                    "--replace`, one member at a time; docs/azure.md)"),
        ("caution", "cloud-pool user-data changes (pool-cpu; 6 line(s)): the scale set's model changes; new "
                    "instances boot with it"),
        ("caution", "controlplane stack setting skyrack:kubernetesAptRepo: https://pkgs.k8s.io/core:/stable:/v1.31/"
                    "deb/ → https://mirror.example.org/k8s/v1.31/deb/"),
        ("caution", "controlplane stack setting skyrack:vpnSharedKey: changed (a secret)"),
        ("caution", "etcd user-data changes (etcd-0, etcd-1, etcd-2; 18 line(s)): running VMs keep what they booted "
                    "with (ignore_changes); each boots with it when replaced (`pulumi up --replace`, one member at a "
                    "time; docs/azure.md)"),
    ]
    assert "c2VjcmV0" not in repr(report.as_dict())
    assert [e.status for e in report.envs if e.name == "lab"] == ["unchanged"]


def test_code_and_file_changed_together_each_consequence_once(code_repo: GitRepo):
    """A node added (the file) and the IPAM change (the code): the node is reported once, by the file's
    comparison; the moved subnets once, by the derivation."""
    edit(code_repo, "modules/skyrack/ipam.py", lambda t: t.replace('("apiservers", 28)', '("apiservers", 27)'))
    code_repo.edit("dev", lambda d: d["racks"][0]["nodes"].append({"name": "r01-n05", "ip": "10.67.0.15"}))
    code_repo.commit("room for more API servers, and one more node")
    _, data = diff(code_repo, "pr")
    status, changes = verdicts(data)["dev"]
    assert status == "modified"
    assert [c for c in changes if c[1] == "nodes"] == [("info", "nodes", "rack r01: 1 node added")], changes
    assert one(changes, "subnet etcd ")[0] == "danger"


def test_an_environment_that_loses_its_apt_repository_cannot_run_its_stack(repo: GitRepo):
    settings = repo.configs / "Pulumi.dev.yaml"
    settings.write_text("config:\n  skyrack:kubernetesAptRepo: https://pkgs.k8s.io/core:/stable:/v1.31/deb/\n")
    repo.commit("dev's apt repository")
    settings.write_text("config: {}\n")
    changes = only(repo.diff("HEAD"))
    (stop,) = [c for c in changes if "the stack cannot run" in c.message]
    assert stop.risk == "caution" and "skyrack:kubernetesAptRepo is set" in stop.message
    repo.commit("lost it")
    settings.write_text("config:\n  skyrack:kubernetesAptRepo: https://pkgs.k8s.io/core:/stable:/v1.31/deb/\n")
    changes = only(repo.diff("HEAD"))
    assert [c.risk for c in changes if "every VM's user-data renders now" in c.message] == ["info"]
