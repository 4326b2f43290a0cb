"""The GitHub workflows as a user adopts them: actionlint on every file, and the review and deploy
workflows' `run:` steps executed exactly as written, in a scratch clone of this checkout.

What stands in for GitHub: the `${{ }}` expressions of a job's and a step's `env:` are
evaluated from a small context (secrets and variables are test values); `uses:` steps are
not run (the clone is the checkout; artifacts and comments need GitHub); `sudo` runs the
command as is (the tests run as root). The Pulumi CLI is absent here, so a stub `pulumi` on
PATH records each call (arguments, whether the backend settings came through the
environment) and prints a line; the previews and updates themselves need Azure. Everything
else runs for real: `./dev setup` (its venv, caches and npm tools linked from this
checkout, so it is the idempotent no-op it is on a set-up machine), the policy pack's
virtualenv (pip), every `skyrack` command, `jq`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from gitops_helpers import GitRepo

from support import ROOT, need

WORKFLOWS = ROOT / ".github/workflows"
ACTIONLINT_VERSION = "v1.7.12"  # as ./dev builds it
SECRETS = {"PULUMI_BACKEND_URL": "azblob://state-secret-url", "PULUMI_ACCESS_TOKEN": "pul-secret-token",
           "PULUMI_CONFIG_PASSPHRASE": "secret-passphrase"}
PULUMI_STUB = """#!/usr/bin/env bash
# A stand-in for the Pulumi CLI (absent here): records the call, answers like a deployed stack.
python3 -c 'import json, os, sys; print(json.dumps({"argv": sys.argv[1:], "backend_in_env":
    bool(os.environ.get("PULUMI_BACKEND_URL")), "passphrase_in_env": bool(os.environ.get("PULUMI_CONFIG_PASSPHRASE"))}))' \\
    "$@" >> "$PULUMI_STUB_LOG"
case " $* " in
  *" stack output "*) echo '"https://10.0.0.46:6443"' ;;
  *" preview "*) echo "Previewing update (stub): $*" ;;
esac
"""


def actionlint() -> str | None:
    cached = Path("/var/cache/skyrack/tools") / f"actionlint-{ACTIONLINT_VERSION}" / "actionlint"
    for candidate in (shutil.which("actionlint"), ROOT / ".venv/bin/actionlint", cached):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def test_actionlint_finds_nothing_in_the_workflows():
    tool = actionlint()
    if tool is None:
        need(f"actionlint {ACTIONLINT_VERSION} (./dev setup builds it from its Go module)")
    assert shutil.which("shellcheck"), "actionlint checks run: scripts with shellcheck"
    proc = subprocess.run([tool, "-no-color"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for job in workflow["jobs"].values() for s in job["steps"]]


def test_secrets_and_expressions_reach_scripts_through_the_environment_only():
    for name in ("review.yml", "deploy.yml", "rack.yml"):
        wf = load(name)
        for step in steps(wf):
            assert "${{" not in step.get("run", ""), f"{name}: an expression inside a script: {step}"
        text = (WORKFLOWS / name).read_text()
        for line in (line for line in text.splitlines() if "secrets." in line):
            assert re.match(r"\s+[A-Z_]+: \$\{\{ secrets\.[A-Z_]+ \}\}$", line), f"{name}: {line.strip()}"


def test_every_environment_with_a_stack_has_a_kubernetes_repository():
    """`pulumi preview -s dev` stopped with a RunError: no mirrors.kubernetes, no skyrack:kubernetesAptRepo."""
    from skyrack import plan as planmod
    from skyrack.gitops.derive import Where, kubernetes_repo
    from skyrack.gitops.git import is_env_file

    def read(rel: str) -> str | None:
        return (ROOT / rel).read_text() if (ROOT / rel).is_file() else None

    for path in sorted(p for p in (ROOT / "configs").iterdir() if is_env_file(p.name)):
        plan = planmod.make(path)
        if plan.env.lab is None:
            assert kubernetes_repo(plan, Where(f"configs/{path.name}", read, ROOT)), path.name


def test_rack_runs_join_with_the_stack_outputs_in_a_private_file():
    (join,) = [s for s in steps(load("rack.yml")) if "skyrack join" in s.get("run", "")]
    script = join["run"]
    assert "umask 077" in script and "trap 'rm -f \"$outputs\"' EXIT" in script
    assert 'pulumi stack output --json --show-secrets --non-interactive --stack "$ENV_NAME" > "$outputs"' in script
    assert '--outputs "$outputs"' in script.splitlines()[-1]


# ----------------------------------------------------------------------------- running the scripts


class Context:
    """What `${{ }}` may name in the workflows' env: blocks."""

    def __init__(self, **values: Any):
        self.values = {"secrets": SECRETS, "vars": {k: f"var-{k.lower()}" for k in
                                                    ("AZURE_CLIENT_ID", "AZURE_PREVIEW_CLIENT_ID",
                                                     "AZURE_TENANT_ID", "AZURE_SUBSCRIPTION_ID")}, **values}

    def eval(self, text: str) -> str:
        def one(m: re.Match[str]) -> str:
            value: Any = self.values
            for part in m.group(1).strip().split("."):
                if not isinstance(value, dict) or part not in value:
                    raise AssertionError(f"the test's context has no {m.group(1).strip()!r}")
                value = value[part]
            return str(value)
        return re.sub(r"\$\{\{(.*?)\}\}", one, str(text))


def clone(tmp_path: Path) -> GitRepo:
    """This checkout's files (committed or not), committed as main, with origin/main pointing at it."""
    r = GitRepo(tmp_path / "clone")
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    for rel in (p for p in listing.split("\0") if p and ((ROOT / p).is_file() or (ROOT / p).is_symlink())):
        (r.root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, r.root / rel, follow_symlinks=False)  # modules/skyrack/ansible -> ../../ansible
    r.commit("main")
    linked = (".venv", ".cache", "scripts/npm-tools/node_modules")
    import userdata_check

    sources = {rel: ROOT / rel for rel in linked} | {".cache": userdata_check.CACHE}  # $SKYRACK_CACHE moves it
    for rel in linked:
        if not sources[rel].exists():
            need(f"{rel} (run ./dev setup)")
        (r.root / rel).symlink_to(sources[rel])
    with (r.root / ".git/info/exclude").open("a") as f:  # .gitignore's "dir/" patterns do not match a link
        f.write("".join(f"/{rel}\n" for rel in linked))
    r.git("update-ref", "refs/remotes/origin/main", "main")
    return r


def run_job(r: GitRepo, workflow: dict[str, Any], job: str, ctx: Context, bin_dir: Path) -> dict[str, str]:
    """Run a job's `run:` steps in order, as GitHub does (bash -e, the job's and the step's env); its outputs."""
    spec = workflow["jobs"][job]
    output = r.root.parent / f"{job}.output"
    output.write_text("")
    base = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CI": "true", "GITHUB_OUTPUT": str(output),
            "RUNNER_TEMP": str(r.root.parent), "GITHUB_WORKSPACE": str(r.root)}
    base.pop("VIRTUAL_ENV", None)
    job_env = {k: ctx.eval(v) for k, v in (spec.get("env") or {}).items()}
    for step in spec["steps"]:
        if "run" not in step:
            continue
        assert step.get("if", "${{ !cancelled() }}") == "${{ !cancelled() }}", step
        env = {**base, **job_env, **{k: ctx.eval(v) for k, v in (step.get("env") or {}).items()}}
        proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=r.root, env=env, capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, f"{job}: {step.get('name', step['run'][:60])}\n{proc.stdout}\n{proc.stderr}"
    return dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    (d / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    if shutil.which("pulumi") is None:
        (d / "pulumi").write_text(PULUMI_STUB)
    for f in d.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    return d


def pulumi_calls(log: Path) -> list[dict[str, Any]]:
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    for c in calls:
        assert not set(c["argv"]) & set(SECRETS.values()), c  # never a secret on a command line
        assert c["backend_in_env"] and c["passphrase_in_env"], c
    return calls


def test_the_review_workflow_runs_as_written(tmp_path: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch):
    if shutil.which("pulumi"):
        pytest.skip("a real Pulumi CLI is installed: its previews would need Azure and a state backend")
    r = clone(tmp_path)
    r.git("checkout", "-q", "-b", "pr")
    etcd_unit = r.root / "modules/skyrack/templates/cloud-init/etcd.service.j2"
    etcd_unit.write_text(etcd_unit.read_text().replace("LimitNOFILE=65536", "LimitNOFILE=131072"))
    r.commit("etcd: more file descriptors")
    wf = load("review.yml")
    ctx = Context(github={"base_ref": "main", "repository": "lab/skyrack"})

    run_job(r, wf, "check", ctx, bin_dir)  # every environment, not the stack settings or lock files
    out = run_job(r, wf, "diff", ctx, bin_dir)
    assert out["danger"] == "0"
    assert json.loads(out["environments"]) == ["dev", "prod"]  # lab changed too, but has no stack
    report = json.loads((r.root / "skyrack-diff.json").read_text())
    assert report["code_changes"] == ["modules/skyrack/templates/cloud-init/etcd.service.j2"]
    assert (r.root / "skyrack-diff.md").read_text().startswith("<!-- skyrack-diff -->")

    log = tmp_path / "pulumi.log"
    monkeypatch.setenv("PULUMI_STUB_LOG", str(log))
    run_job(r, wf, "preview", Context(matrix={"env": "dev"}), bin_dir)
    calls = [c["argv"] for c in pulumi_calls(log)]
    assert calls == [
        ["login", "--non-interactive"],
        ["stack", "select", "--create", "--non-interactive", "dev"],
        ["preview", "--diff", "--non-interactive", "--stack", "dev", "--policy-pack", "policy"],
        ["stack", "output", "--stack", "dev", "apiserver_endpoint"],
        ["-C", "stacks/cluster", "stack", "select", "--create", "--non-interactive", "dev"],
        ["-C", "stacks/cluster", "preview", "--diff", "--non-interactive", "--stack", "dev"],
    ]
    assert (r.root / "policy/venv/bin/python").exists()  # the policy pack's own virtualenv was made
    body = (r.root / "preview.md").read_text()
    assert body.startswith("<!-- skyrack-preview:dev -->\n### pulumi preview: `dev`")
    assert "Previewing update (stub): -C stacks/cluster preview" in body


def test_the_deploy_workflow_runs_as_written(tmp_path: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch):
    if shutil.which("pulumi"):
        pytest.skip("a real Pulumi CLI is installed: its updates would need Azure and a state backend")
    r = clone(tmp_path)
    before = r.git("rev-parse", "HEAD").strip()
    r.edit("dev", lambda d: d["racks"][0]["nodes"].append({"name": "r01-n05", "ip": "10.64.1.15"}))
    r.commit("one more node in dev")
    wf = load("deploy.yml")
    out = run_job(r, wf, "changes", Context(github={"event": {"before": before}}), bin_dir)
    assert json.loads(out["environments"]) == ["dev"]

    log = tmp_path / "pulumi.log"
    monkeypatch.setenv("PULUMI_STUB_LOG", str(log))
    run_job(r, wf, "up", Context(matrix={"env": "dev"}), bin_dir)
    assert [c["argv"][:4] for c in pulumi_calls(log)] == [
        ["login", "--non-interactive"],
        ["stack", "select", "--create", "--non-interactive"],
        ["up", "--yes", "--diff", "--non-interactive"],
        ["-C", "stacks/cluster", "stack", "select"],
        ["-C", "stacks/cluster", "up", "--yes"],  # the cluster layer after the control plane
    ]
