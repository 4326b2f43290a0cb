"""`skyrack diff` on repositories: files added, deleted, renamed; bad revisions and
invalid environments; output formats and exit codes of the real command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gitops_helpers import GitRepo, find, only

from support import run_cli


def test_environment_added_deleted_renamed(repo: GitRepo):
    repo.copy("prod")
    (repo.configs / "lab.yaml").unlink()
    (repo.configs / "lab.lock.yaml").unlink()
    data = repo.load("dev")
    data["name"] = "dev2"
    (repo.configs / "dev.yaml").unlink()
    (repo.configs / "dev.lock.yaml").rename(repo.configs / "dev2.lock.yaml")
    repo.write("dev2", data)
    report = repo.diff()
    status = {e.name: (e.status, e.base_path, e.head_path) for e in report.envs}
    assert status == {"prod": ("added", None, "configs/prod.yaml"), "lab": ("deleted", "configs/lab.yaml", None),
                      "dev2": ("renamed", "configs/dev.yaml", "configs/dev2.yaml")}
    assert find(only(report, "prod"), "new environment: 7,680 on-prem nodes").risk == "info"
    assert find(only(report, "lab"), "environment deleted").risk == "danger"
    renamed = only(report, "dev2")
    assert find(renamed, "renamed from configs/dev.yaml").risk == "danger"
    assert find(renamed, "resource group skyrack-dev → skyrack-dev2").risk == "danger"
    assert report.exit_code == 1


def test_between_two_commits_and_only_one_environment(repo: GitRepo):
    repo.edit("dev", lambda d: d["kubernetes"].update(version="1.37.3"))
    head = repo.commit("upgrade")
    repo.edit("dev", lambda d: d["kubernetes"].update(version="1.38.0"))  # working tree: not compared below
    report = repo.diff("main~1", head, only={"dev"})
    assert [e.name for e in report.envs] == ["dev"]
    assert find(only(report), "Kubernetes patch upgrade 1.37.2 → 1.37.3").risk == "caution"
    assert report.exit_code == 0


def test_cli_exit_codes_and_json(repo: GitRepo):
    assert run_cli("diff", "main", cwd=repo.root).returncode == 0
    repo.edit("dev", lambda d: d["control_plane"]["etcd"].update(count=5))
    proc = run_cli("diff", "main", "--format", "json", cwd=repo.root)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is False and data["summary"]["danger"] == 1 and data["summary"]["changed"] == 1
    (dev,) = [e for e in data["environments"] if e["name"] == "dev"]
    assert dev["changes"][0] == {"risk": "danger", "area": "control-plane", "field": "control_plane.etcd.count",
                                 "message": dev["changes"][0]["message"], "nodes": []}
    text = run_cli("diff", "main", cwd=repo.root)
    assert text.returncode == 1 and "danger   control-plane  etcd 3 → 5 members" in text.stdout


def test_a_configs_directory_with_nothing_to_compare_fails_the_gate(repo: GitRepo, tmp_path: Path):
    """The review gate never passes on what it could not read: a --configs that does not exist, or that holds
    no environment at either revision, is exit 1 with the reason (text and JSON), not "0 environments changed"."""
    proc = run_cli("diff", "HEAD", "--configs", "no-such-dir", cwd=repo.root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("no-such-dir: no environment file (<name>.yaml) at HEAD or in the working tree (and it is no directory "
            "here): nothing to compare; is --configs right?") in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    (repo.root / "empty").mkdir()
    (repo.root / "empty" / "notes.txt").write_text("not an environment\n")
    proc = run_cli("diff", "main", "HEAD", "--configs", "empty", "--format", "json", cwd=repo.root)
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["ok"] is False and "empty: no environment file (<name>.yaml) at main or HEAD: nothing to compare" \
        in data["error"] + json.dumps(data.get("problems")), data
    # an environment that exists only on one side is a comparison, not nothing
    (repo.root / "empty" / "dev.yaml").write_text((repo.configs / "dev.yaml").read_text())
    (repo.root / "empty" / "dev.lock.yaml").write_text((repo.configs / "dev.lock.yaml").read_text())
    proc = run_cli("diff", "main", "--configs", "empty", cwd=repo.root)
    assert "new environment" in proc.stdout, proc.stdout + proc.stderr


def test_missing_revision_is_a_clear_error(repo: GitRepo):
    proc = run_cli("diff", "no-such-branch", cwd=repo.root)
    assert proc.returncode == 1
    assert "no-such-branch: no such revision" in proc.stderr and "Traceback" not in proc.stderr


def test_not_a_repository(tmp_path: Path):
    proc = run_cli("diff", "main", cwd=tmp_path)
    assert proc.returncode == 1 and "not inside a git repository" in proc.stderr


def test_usage_errors_exit_2(repo: GitRepo):
    assert run_cli("diff", "main", "--format", "yaml", cwd=repo.root).returncode == 2
    proc = run_cli("diff", "main", "--env", "staging", cwd=repo.root)
    assert proc.returncode == 2 and "no environment staging" in proc.stderr


def test_invalid_environment_at_head_gives_the_validators_message(repo: GitRepo):
    repo.edit("dev", lambda d: d["control_plane"]["etcd"].update(count=4), lock=False)
    proc = run_cli("diff", "main", cwd=repo.root)
    assert proc.returncode == 1
    assert "configs/dev.yaml: control_plane.etcd.count: 4 is even" in proc.stdout
    data = json.loads(run_cli("diff", "main", "-f", "json", cwd=repo.root).stdout)
    (dev,) = [e for e in data["environments"] if e["name"] == "dev"]
    assert dev["status"] == "invalid" and dev["problems"][0]["path"] == "control_plane.etcd.count"


def test_invalid_environment_at_base_names_the_revision(repo: GitRepo):
    (repo.configs / "dev.yaml").write_text((repo.configs / "dev.yaml").read_text() + "bogus: 1\n")
    repo.commit("broken")
    repo.edit("dev", lambda d: d.pop("bogus"))
    report = repo.diff("HEAD")
    (dev,) = [e for e in report.envs if e.name == "dev"]
    assert dev.status == "invalid" and str(dev.problems[0]) == "HEAD:configs/dev.yaml: bogus: unknown key"


def test_a_key_this_code_retired_is_ignored_at_base_and_refused_at_head(repo: GitRepo):
    """The pull request that drops a retired key (config.validate.RETIRED) is reviewable: its base still has
    the key; a head that keeps it is told why the key went, not "unknown key"."""
    repo.edit("dev", lambda d: d["cluster"].update(gang_permit_wait_seconds=60), lock=False)
    repo.commit("an environment file of the skyrack before gang scheduling moved into kube-scheduler")
    repo.edit("dev", lambda d: d["cluster"].pop("gang_permit_wait_seconds"), lock=False)
    (dev,) = [e for e in repo.diff("HEAD").envs if e.name == "dev"]
    assert dev.status == "modified" and not dev.problems, dev.problems
    assert [c.message for c in dev.changes] == []
    repo.edit("dev", lambda d: d["cluster"]["versions"].update(
        scheduler_plugins="registry.k8s.io/scheduler-plugins/kube-scheduler:v0.31.8"), lock=False)
    proc = run_cli("diff", "HEAD", cwd=repo.root)
    assert proc.returncode == 1
    assert ("configs/dev.yaml: cluster.versions.scheduler_plugins: no longer a setting: gang scheduling is "
            "kube-scheduler's own") in proc.stdout


def test_markdown_of_64_new_nodes_stays_readable(repo: GitRepo):
    def rack(d: dict[str, Any]) -> None:
        d["racks"].append({"name": "r03", "team": "vision", "gpu": {"model": "H100-SXM5-80GB", "count": 8},
                           "node_range": {"count": 64, "first_ip": "10.64.3.10"}})
        d["teams"][1]["gpu_quota"] = 16 + 512

    repo.edit("dev", rack)
    proc = run_cli("diff", "main", "--format", "markdown", cwd=repo.root)
    assert proc.returncode == 0
    md = proc.stdout
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    # header + the rack + the team quota + that quota's object in the cluster layer (derived)
    assert len(rows) == 4, rows
    assert any("1 cluster-layer object(s) change (ResourceQuota/" in r and "caution" in r for r in rows), rows
    assert sum("rack r03 added: 64 nodes" in r for r in rows[1:]) == 1
    assert "<details><summary>64 node(s) concerned, by rack</summary>" in md
    assert "r03-n01, r03-n02" in md and "r03-n64" in md
    assert md.startswith("<!-- skyrack-diff -->") and "Unchanged: lab." in md


def test_deleting_an_environment_that_was_invalid_is_still_a_deletion(repo: GitRepo):
    (repo.configs / "lab.yaml").write_text("name: lab\n")
    repo.commit("broken lab")
    (repo.configs / "lab.yaml").unlink()
    (lab,) = [e for e in repo.diff("HEAD").envs if e.name == "lab"]
    assert lab.status == "deleted" and "did not validate" in lab.changes[0].message
    assert lab.changes[0].risk == "danger"


def test_save_writes_every_format_from_one_comparison(repo: GitRepo, tmp_path: Path):
    repo.edit("dev", lambda d: d["control_plane"]["etcd"].update(count=5))
    out = tmp_path / "out"
    out.mkdir()
    proc = run_cli("diff", "main", "--save", str(out / "d.json"), "--save", str(out / "d.md"),
                   "--save", str(out / "d.txt"), cwd=repo.root)
    assert proc.returncode == 1  # the danger item, as without --save
    assert (out / "d.txt").read_text() == proc.stdout
    assert (out / "d.json").read_text() == run_cli("diff", "main", "--format", "json", cwd=repo.root).stdout
    assert (out / "d.md").read_text() == run_cli("diff", "main", "--format", "markdown", cwd=repo.root).stdout
    bad = run_cli("diff", "main", "--save", str(out / "d.yaml"), cwd=repo.root)
    assert bad.returncode == 2 and "suffix names the format" in bad.stderr and not (out / "d.yaml").exists()


def test_a_ca_file_is_read_at_each_revision(repo: GitRepo):
    """`mirrors.ca: site-ca.pem` beside the environment: the base side reads the file as that revision had it."""
    from skyrack import pki

    old, new = pki.create_ca("site CA 2025"), pki.create_ca("site CA 2026")
    (repo.configs / "site-ca.pem").write_text(old.cert_pem)
    repo.edit("dev", lambda d: d["mirrors"].update(ca="site-ca.pem"))
    repo.commit("the site's CA")
    (repo.configs / "site-ca.pem").write_text(new.cert_pem)  # only the file changes, in the working tree
    change = find(only(repo.diff()), "CA ")
    assert change.field == "mirrors.ca"
    assert f"CA {pki.fingerprint(old.cert_pem)[:23]}… → CA {pki.fingerprint(new.cert_pem)[:23]}…" in change.message
    (repo.configs / "site-ca.pem").unlink()
    repo.commit("the file removed")
    proc = run_cli("diff", "main~1", "main", cwd=repo.root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "main:configs/dev.yaml: mirrors.ca: site-ca.pem: no such file beside the environment file" in proc.stdout
