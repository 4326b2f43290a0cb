"""The GitHub workflows as a user adopts them: actionlint on every file, what each job needs (the
runners, the OIDC login, the light setup), and the review, approval and deploy workflows' `run:`
steps executed exactly as written, in a scratch clone of this checkout set up with the light
setup alone (`./dev setup --cli`).

What stands in for GitHub: the `${{ }}` expressions of a job's and a step's `env:` are
evaluated from a small context (secrets and variables are test values); `uses:` steps are
not run (the clone is the checkout; artifacts and comments need GitHub). The Pulumi CLI is
absent here, so a stub `pulumi` on PATH records each call (arguments, whether the backend
settings came through the environment) and prints a line, or fails as told (a missing stack,
a failed update); the previews and updates themselves need Azure. `sudo`, `apt-get`,
`dpkg-query`, `go`, `npm` and `actionlint` are stubs that fail: no job but the test suite may
need them. Everything else runs for real: `./dev setup --cli` (once, in a clone of its own:
a new `.venv` from PyPI; the jobs' clones link that `.venv`, so their own `./dev setup --cli`
is the idempotent no-op it is on a set-up runner), the policy pack's virtualenv (pip), every
`skyrack` command, `jq`.
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
  *" stack select "* | *" stack output "*)
    if [ -n "${PULUMI_STUB_MISSING:-}" ]; then echo "error: no stack named '${*: -1}' found" >&2; exit 255; fi ;;
esac
case " $* " in
  *" stack output "*) echo '"https://10.0.0.46:6443"' ;;
  *" preview "*) echo "Previewing update (stub): $*" ;;
  *" up "*) if [ -n "${PULUMI_STUB_FAIL_UP:-}" ]; then echo "error: update failed (stub)" >&2; exit 255; fi ;;
esac
"""
# What only the test suite's setup may use: a light job calling one of these fails.
FORBIDDEN = ("sudo", "apt-get", "dpkg-query", "go", "npm", "actionlint")


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


ALL = ("review.yml", "approval.yml", "deploy.yml", "rack.yml")


def jobs() -> list[tuple[str, str, dict[str, Any]]]:
    return [(name, job_name, job) for name in ALL for job_name, job in load(name)["jobs"].items()]


def test_secrets_and_expressions_reach_scripts_through_the_environment_only():
    for name in ALL:
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


def test_a_label_runs_the_approval_gate_alone():
    """The approval label used to cancel and restart the whole review (./dev test included) through its
    concurrency group: labels now trigger approval.yml only, whose one job runs skyrack diff and the gate."""
    review, approval = load("review.yml"), load("approval.yml")
    on = lambda wf: set(wf[True]["pull_request"]["types"])  # noqa: E731 - YAML 1.1 reads the key `on` as True
    assert on(review) == {"opened", "synchronize", "reopened"}
    assert on(approval) == on(review) | {"labeled", "unlabeled"}
    assert list(approval["jobs"]) == ["approval"]
    assert review["concurrency"]["group"] != approval["concurrency"]["group"]
    assert "approval" not in review["jobs"]


def test_jobs_touching_the_state_backend_or_azure_log_in_with_oidc():
    for name, job_name, job in jobs():
        scripts = " ".join(s.get("run", "") for s in job["steps"])
        uses = [s.get("uses", "") for s in job["steps"]]
        if "pulumi " in scripts or any(u.startswith("pulumi/actions") for u in uses):
            assert job.get("permissions", {}).get("id-token") == "write", f"{name} {job_name}"
            assert any(u.startswith("azure/login@") for u in uses), f"{name} {job_name}"
            assert job["env"]["ARM_USE_OIDC"] == "true", f"{name} {job_name}"


def test_jobs_reaching_the_vnet_or_the_racks_run_on_the_documented_self_hosted_runners():
    declared = yaml.safe_load((ROOT / ".github/actionlint.yaml").read_text())["self-hosted-runner"]["labels"]
    doc = (ROOT / "docs/gitops.md").read_text()
    reaching = {}
    for name, job_name, job in jobs():
        scripts = " ".join(s.get("run", "") for s in job["steps"])
        if "stacks/cluster" in scripts or "skyrack join" in scripts:  # the API server's private endpoint; SSH
            reaching[f"{name} {job_name}"] = job["runs-on"]
    assert reaching == {
        "review.yml preview": ["self-hosted", "skyrack-vnet", "${{ matrix.env }}"],
        "deploy.yml up": ["self-hosted", "skyrack-vnet", "${{ matrix.env }}"],
        "rack.yml join": ["self-hosted", "skyrack", "${{ inputs.env }}"],
    }
    for label in ("skyrack", "skyrack-vnet"):
        assert label in declared and f"`{label}`" in doc


def test_only_the_test_suite_sets_up_more_than_the_command_line():
    setups = {(name, job_name, s["run"].split("#")[0].strip()) for name, job_name, job in jobs()
              for s in job["steps"] if "./dev" in s.get("run", "")}
    assert {x for x in setups if x[2] != "./dev setup --cli"} == {("review.yml", "test", "sudo ./dev test")}


def test_a_preview_never_creates_a_stack_and_a_failed_deploy_stops_no_other_environment():
    review = (WORKFLOWS / "review.yml").read_text()
    assert "stack select" in review and "--create" not in review
    up = load("deploy.yml")["jobs"]["up"]
    assert up["strategy"]["fail-fast"] is False


# ----------------------------------------------------------------------------- running the scripts


class Context:
    """What `${{ }}` may name in the workflows' env: blocks."""

    def __init__(self, **values: Any):
        self.values = {"secrets": SECRETS, "vars": {k: f"var-{k.lower()}" for k in
                                                    ("AZURE_CLIENT_ID", "AZURE_PREVIEW_CLIENT_ID",
                                                     "AZURE_TENANT_ID", "AZURE_SUBSCRIPTION_ID")}, **values}

    def eval(self, text: str) -> str:
        """A dotted name (`a.*.b`: `b` of each element of `a`), or `toJSON(name)`, as GitHub evaluates them."""
        def lookup(value: Any, parts: list[str], expr: str) -> Any:
            if not parts:
                return value
            if parts[0] == "*" and isinstance(value, list):
                return [lookup(v, parts[1:], expr) for v in value]
            if not isinstance(value, dict) or parts[0] not in value:
                raise AssertionError(f"the test's context has no {expr!r}")
            return lookup(value[parts[0]], parts[1:], expr)

        def one(m: re.Match[str]) -> str:
            expr = m.group(1).strip()
            to_json = re.fullmatch(r"toJSON\((.*)\)", expr)
            value = lookup(self.values, (to_json.group(1) if to_json else expr).strip().split("."), expr)
            return json.dumps(value) if to_json else str(value)
        return re.sub(r"\$\{\{(.*?)\}\}", one, str(text))


def clone(tmp_path: Path, venv: Path | None = None) -> GitRepo:
    """This checkout's files (committed or not), committed as main, with origin/main pointing at it; `.venv`
    a link to `venv` (the light setup's) when given."""
    r = GitRepo(tmp_path / "clone")
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    for rel in (p for p in listing.split("\0") if p and ((ROOT / p).is_file() or (ROOT / p).is_symlink())):
        (r.root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, r.root / rel, follow_symlinks=False)  # modules/skyrack/ansible -> ../../ansible
    r.commit("main")
    if venv is not None:
        (r.root / ".venv").symlink_to(venv)
        with (r.root / ".git/info/exclude").open("a") as f:  # .gitignore's ".venv/" does not match a link
            f.write("/.venv\n")
    r.git("update-ref", "refs/remotes/origin/main", "main")
    return r


def forbidden(bin_dir: Path) -> Path:
    bin_dir.mkdir(exist_ok=True)
    for tool in FORBIDDEN:
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} is not for a light job: $*" >&2\nexit 97\n')
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def dev_setup_cli(root: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(["./dev", "setup", "--cli"], cwd=root, env=env, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def light(tmp_path_factory) -> Path:
    """The `.venv` that `./dev setup --cli` makes in a clone of its own (from PyPI, no root, no lab tools)."""
    tmp = tmp_path_factory.mktemp("light")
    r = clone(tmp)
    bin_dir = forbidden(tmp / "bin")
    first = dev_setup_cli(r.root, bin_dir)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "installing skyrack and the Pulumi SDKs into .venv" in first.stderr
    assert (r.root / ".venv/.skyrack-installed-cli").is_file() and not (r.root / ".venv/.skyrack-installed").exists()
    again = dev_setup_cli(r.root, bin_dir)  # idempotent: nothing installed the second time
    assert again.returncode == 0, again.stderr
    assert "is up to date" in again.stderr and "installing" not in again.stderr
    assert not (r.root / ".cache").exists() and not (r.root / "scripts/npm-tools/node_modules").exists()
    return r.root / ".venv"


def test_the_light_setup_runs_the_command_line(light: Path):
    """validate, check, plan, inventory, the cluster layer's objects (its program under mocks) and diff, from
    the light venv alone."""
    out = {}
    for args in (["validate", "dev"], ["check", "dev"], ["plan", "--locked", "dev"], ["inventory", "dev", "--json"],
                 ["kube", "manifests", "dev"], ["diff", "HEAD", "--env", "dev", "--format", "json"]):
        proc = subprocess.run([str(light / "bin/skyrack"), *args], cwd=light.parent, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, f"skyrack {' '.join(args)}: {proc.stderr}"
        out[args[0]] = proc.stdout
    assert json.loads(out["inventory"])["all"]["children"]
    assert "kind: PriorityClass" in out["kube"]  # the cluster layer's program ran under mocks
    assert json.loads(out["diff"])["environments"][0]["status"] == "unchanged"


def run_job(r: GitRepo, workflow: dict[str, Any], job: str, ctx: Context, bin_dir: Path,
            failures: list[str] | None = None) -> dict[str, str]:
    """Run a job's `run:` steps in order, as GitHub does (bash -e, the job's and the step's env); its outputs.

    A failing step fails the test, unless `failures` is given: then its name (and output) is appended, and
    only the steps that run after a failure (`if: ${{ !cancelled() }}`) run on, as on GitHub."""
    spec = workflow["jobs"][job]
    output = r.root.parent / f"{job}.output"
    output.write_text("")
    base = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CI": "true", "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(r.root.parent / f"{job}.summary.md"), "RUNNER_TEMP": str(r.root.parent),
            "GITHUB_WORKSPACE": str(r.root)}
    base.pop("VIRTUAL_ENV", None)
    job_env = {k: ctx.eval(v) for k, v in (spec.get("env") or {}).items()}
    failed = False
    for step in spec["steps"]:
        if "run" not in step:
            continue
        assert step.get("if", "${{ !cancelled() }}") == "${{ !cancelled() }}", step
        if failed and "if" not in step:
            continue
        ctx.values["job"] = {"status": "failure" if failed else "success"}
        env = {**base, **job_env, **{k: ctx.eval(v) for k, v in (step.get("env") or {}).items()}}
        proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=r.root, env=env, capture_output=True,
                              text=True, timeout=900)
        what = f"{job}: {step.get('name', step['run'][:60])}"
        if proc.returncode != 0 and failures is not None:
            failures.append(f"{step.get('name', step['run'][:60])}\n{proc.stdout}\n{proc.stderr}")
            failed = True
            continue
        assert proc.returncode == 0, f"{what}\n{proc.stdout}\n{proc.stderr}"
    return dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)


def failed_steps(r: GitRepo, workflow: dict[str, Any], job: str, ctx: Context, bin_dir: Path) -> list[str]:
    """Run a job that is to fail: each failed step's name, its output on the lines below."""
    failures: list[str] = []
    run_job(r, workflow, job, ctx, bin_dir, failures)
    return failures


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = forbidden(tmp_path / "bin")
    if shutil.which("pulumi") is None:
        (d / "pulumi").write_text(PULUMI_STUB)
    for f in d.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    return d


@pytest.fixture
def pulumi_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the stub `pulumi` records its calls. With a real Pulumi CLI installed the workflows' previews and
    updates would need Azure and a state backend: skipped."""
    if shutil.which("pulumi"):
        pytest.skip("a real Pulumi CLI is installed: its previews and updates would need Azure and a state backend")
    log = tmp_path / "pulumi.log"
    monkeypatch.setenv("PULUMI_STUB_LOG", str(log))
    return log


def pulumi_calls(log: Path) -> list[dict[str, Any]]:
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    for c in calls:
        assert not set(c["argv"]) & set(SECRETS.values()), c  # never a secret on a command line
        assert c["backend_in_env"] and c["passphrase_in_env"], c
    return calls


def pr_clone(tmp_path: Path, light: Path) -> GitRepo:
    """A clone with a pull request branch `pr` that changes a template (every environment derived from it)."""
    r = clone(tmp_path, light)
    r.git("checkout", "-q", "-b", "pr")
    etcd_unit = r.root / "modules/skyrack/templates/cloud-init/etcd.service.j2"
    etcd_unit.write_text(etcd_unit.read_text().replace("LimitNOFILE=65536", "LimitNOFILE=131072"))
    r.commit("etcd: more file descriptors")
    return r


def test_the_review_workflow_runs_as_written(tmp_path: Path, light: Path, bin_dir: Path, pulumi_log: Path):
    r = pr_clone(tmp_path, light)
    wf = load("review.yml")
    ctx = Context(github={"base_ref": "main", "repository": "lab/skyrack"})

    run_job(r, wf, "check", ctx, bin_dir)  # every environment, not the stack settings or lock files
    out = run_job(r, wf, "diff", ctx, bin_dir)
    assert json.loads(out["environments"]) == ["dev", "prod"]  # lab changed too, but has no stack
    assert json.loads(out["new"]) == []
    report = json.loads((r.root / "skyrack-diff.json").read_text())
    assert report["code_changes"] == ["modules/skyrack/templates/cloud-init/etcd.service.j2"]
    assert (r.root / "skyrack-diff.md").read_text().startswith("<!-- skyrack-diff -->")
    run_job(r, load("approval.yml"), "approval", Context(github={**ctx.values["github"], "event": {
        "pull_request": {"labels": []}}}), bin_dir)  # no danger: nothing to approve

    run_job(r, wf, "preview", Context(matrix={"env": "dev"}, needs={"diff": {"outputs": out}}), bin_dir)
    calls = [c["argv"] for c in pulumi_calls(pulumi_log)]
    assert calls == [
        ["login", "--non-interactive"],
        ["stack", "select", "--non-interactive", "dev"],  # never --create
        ["preview", "--diff", "--non-interactive", "--stack", "dev", "--policy-pack", "policy"],
        ["stack", "output", "--stack", "dev", "apiserver_endpoint"],
        ["-C", "stacks/cluster", "stack", "select", "--non-interactive", "dev"],
        ["-C", "stacks/cluster", "preview", "--diff", "--non-interactive", "--stack", "dev"],
    ]
    assert (r.root / "policy/venv/bin/python").exists()  # the policy pack's own virtualenv was made
    body = (r.root / "preview.md").read_text()
    assert body.startswith("<!-- skyrack-preview:dev -->\n### pulumi preview: `dev`")
    assert "Previewing update (stub): -C stacks/cluster preview" in body


def test_a_missing_stack_is_reported_not_created(tmp_path: Path, light: Path, bin_dir: Path, pulumi_log: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    r = pr_clone(tmp_path, light)
    wf = load("review.yml")
    monkeypatch.setenv("PULUMI_STUB_MISSING", "1")
    failures = failed_steps(r, wf, "preview", Context(matrix={"env": "dev"}, needs={"diff": {"outputs": {"new": "[]"}}}),
                            bin_dir)
    assert [f.splitlines()[0] for f in failures] == ["preview the control plane"]
    body = (r.root / "preview.md").read_text()  # posted all the same
    assert "Stack dev does not exist in the state backend (PULUMI_BACKEND_URL), though configs/dev.yaml is not new" \
        in body and "error: no stack named 'dev' found" in body
    assert not [c for c in pulumi_calls(pulumi_log) if "--create" in c["argv"] or "preview" in c["argv"]]

    # an environment the pull request adds has no stack yet: said, and not a failure
    (r.root / "preview.md").unlink()
    run_job(r, wf, "preview", Context(matrix={"env": "dev"}, needs={"diff": {"outputs": {"new": '["dev"]'}}}),
            bin_dir)
    body = (r.root / "preview.md").read_text()
    assert "Stack dev does not exist yet: this pull request adds it" in body
    assert "The control plane of dev is not deployed yet" in body


def test_the_approval_gate_passes_danger_only_with_the_label(tmp_path: Path, light: Path, bin_dir: Path):
    r = clone(tmp_path, light)
    r.git("checkout", "-q", "-b", "pr")
    r.git("rm", "-q", "configs/prod.yaml", "configs/prod.lock.yaml")
    r.commit("remove prod")  # an environment deleted: danger
    wf = load("approval.yml")

    def gate(*labels: str) -> list[str]:
        pr = {"labels": [{"name": name} for name in labels]}
        return failed_steps(r, wf, "approval", Context(github={"base_ref": "main", "event": {"pull_request": pr}}),
                            bin_dir)

    (refused,) = gate("documentation")
    assert "::error::skyrack diff reports danger items" in refused and "prod" in refused
    assert gate("documentation", "skyrack/approved-danger") == []


def test_the_deploy_workflow_runs_as_written(tmp_path: Path, light: Path, bin_dir: Path, pulumi_log: Path):
    r = clone(tmp_path, light)
    before = r.git("rev-parse", "HEAD").strip()
    r.edit("dev", lambda d: d["racks"][0]["nodes"].append({"name": "r01-n05", "ip": "10.67.0.15"}))
    r.commit("one more node in dev")
    wf = load("deploy.yml")
    out = run_job(r, wf, "changes", Context(github={"event": {"before": before}, "ref": "refs/heads/main"},
                                            inputs={"env": ""}), bin_dir)
    assert json.loads(out["environments"]) == ["dev"]

    run_job(r, wf, "up", Context(matrix={"env": "dev"}), bin_dir)
    assert [c["argv"][:4] for c in pulumi_calls(pulumi_log)] == [
        ["login", "--non-interactive"],
        ["stack", "select", "--create", "--non-interactive"],  # a deploy creates a new environment's stack
        ["up", "--yes", "--diff", "--non-interactive"],
        ["-C", "stacks/cluster", "stack", "select"],
        ["-C", "stacks/cluster", "up", "--yes"],  # the cluster layer after the control plane
    ]
    assert (tmp_path / "up.summary.md").read_text() == "- `dev`: deployed\n"


def test_a_failed_deploy_says_so_and_how_to_retry(tmp_path: Path, light: Path, bin_dir: Path, pulumi_log: Path,
                                                  monkeypatch: pytest.MonkeyPatch):
    r = clone(tmp_path, light)
    wf = load("deploy.yml")
    monkeypatch.setenv("PULUMI_STUB_FAIL_UP", "1")
    failures = failed_steps(r, wf, "up", Context(matrix={"env": "dev"}), bin_dir)
    assert [f.splitlines()[0] for f in failures] == ["pulumi up, the control plane"]
    summary = (tmp_path / "up.summary.md").read_text()
    assert summary.startswith("- `dev`: **failed** (failure); the other environments went on.")
    assert "Retry: run the deploy workflow on main with env=dev" in summary

    # the retry: dispatched by hand with the environment's name, that one environment from main as it is
    def dispatch(env: str, ref: str = "refs/heads/main") -> Context:
        return Context(github={"event": {"before": ""}, "ref": ref}, inputs={"env": env})

    assert json.loads(run_job(r, wf, "changes", dispatch("dev"), bin_dir)["environments"]) == ["dev"]
    for ctx, why in ((dispatch("lab"), "configs/lab.yaml is a lab environment: it has no Pulumi stacks"),
                     (dispatch("staging"), "no environment 'staging'"),
                     (dispatch("dev", "refs/heads/feature"), "a deploy runs on main only")):
        failures = failed_steps(r, wf, "changes", ctx, bin_dir)
        assert len(failures) == 1 and why in failures[0], failures
