"""Every command the CLI tells a person to run is one that works as printed.

A hint is a `skyrack ...` command in backticks inside a message. Each case here brings about a
situation that prints one, takes the command out of the message as printed, and:

* where it needs no lab, runs it and shows it repairs what was wrong (the command that failed then
  succeeds);
* where it would boot a lab (`skyrack lab up`, `skyrack etcd lab-up`), parses it with the command
  line's own parser: the command and its flags exist and its environment names the same file. (Running
  those is what tests/lab and tests/etcd do, by the same hint: tests/lab/conftest.py runs the cluster
  layer's `lab pulumi --env ... up` exactly as `lab up` prints it.)

A new hint in the code is found by `test_every_hint_in_the_code_is_covered`, which fails until it has
a case here.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from skyrack import cli
from support import ROOT, run_cli

HINT = re.compile(r"`(skyrack [^`]+)`")


def hints(text: str) -> list[list[str]]:
    """The `skyrack ...` commands a message names, as argument lists (without `skyrack`)."""
    return [shlex.split(h)[1:] for h in HINT.findall(text)]


def parse(args: list[str]) -> tuple[Any, dict]:
    """Parse a command line as `skyrack` would, without running it: (the leaf command, its parameters). A group
    holds back the subcommand's name and arguments (`_protected_args`, then `args`) for `resolve_command`."""
    cmd = typer.main.get_command(cli.app)
    ctx = cmd.make_context("skyrack", list(args))
    while hasattr(cmd, "resolve_command"):
        name, sub, rest = cmd.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        assert sub is not None, f"no command {name!r} in {args}"
        cmd = sub
        ctx = sub.make_context(name, rest, parent=ctx)
    return cmd, ctx.params


@pytest.fixture
def dev(env_copy) -> Path:
    return env_copy("dev")


def test_a_stale_lock_names_the_plan_that_fixes_it(dev):
    text = dev.read_text()
    dev.write_text(text.replace("      - {name: r01-n04, ip: 10.67.0.14}\n",
                                "      - {name: r01-n04, ip: 10.67.0.14}\n      - {name: r01-n05, ip: 10.67.0.15}\n"))
    failed = run_cli("inventory", str(dev))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    [hint] = hints(failed.stderr)
    assert hint[0] == "plan", failed.stderr
    fixed = run_cli(*hint)
    assert fixed.returncode == 0, fixed.stderr
    assert run_cli("inventory", str(dev)).returncode == 0


def test_the_gate_names_the_plan_that_fixes_a_stale_lock(tmp_path):
    """`skyrack diff` on a change whose lock was not re-planned: its hint re-plans it, and the diff passes."""
    import subprocess

    repo = tmp_path / "repo"
    (repo / "configs").mkdir(parents=True)
    for name in ("dev.yaml", "dev.lock.yaml"):
        (repo / "configs" / name).write_text((ROOT / "configs" / name).read_text())

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                       env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                            "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(tmp_path)})

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "base")
    dev = repo / "configs" / "dev.yaml"
    dev.write_text(dev.read_text().replace("      - {name: r01-n04, ip: 10.67.0.14}\n",
                                           "      - {name: r01-n04, ip: 10.67.0.14}\n"
                                           "      - {name: r01-n05, ip: 10.67.0.15}\n"))
    git("commit", "-qam", "a node")
    failed = run_cli("diff", "HEAD~1", "HEAD", "--env", "dev", cwd=repo)
    named = [h for h in hints(failed.stdout + failed.stderr) if h[0] == "plan"]
    assert named, failed.stdout + failed.stderr
    assert run_cli(*named[0], cwd=repo).returncode == 0
    git("commit", "-qam", "its lock")
    again = run_cli("diff", "HEAD~2", "HEAD", "--env", "dev", cwd=repo)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not [h for h in hints(again.stdout + again.stderr) if h[0] == "plan"], again.stdout


def test_a_lab_that_is_not_up_names_lab_up(tmp_path):
    """`lab kubeconfig`, `lab outputs`, `lab pulumi`, `lab fleet up`, `lab replace` and `join` of a lab that is
    not up: each names `skyrack lab up ENV`, a command the parser takes, for the same environment file."""
    import lab_variants as variants

    env = variants.make(ROOT / "configs" / "lab.yaml", tmp_path, "skyrackh0", 61)
    for args in (["lab", "kubeconfig", str(env)], ["lab", "outputs", str(env)],
                 ["lab", "pulumi", "--env", str(env), "preview"], ["join", str(env)],
                 ["lab", "fleet", "up", str(env), "--nodes", "10"], ["lab", "replace", "apiserver-0", str(env)]):
        failed = run_cli(*args)
        assert failed.returncode == 1, (args, failed.stdout, failed.stderr)
        found = hints(failed.stdout + failed.stderr)
        assert found and found[0][:2] == ["lab", "up"], (args, failed.stderr)
        cmd, params = parse(found[0])
        assert cmd.name == "up" and Path(params["path"]).resolve() == env.resolve(), (args, params)


def test_etcd_of_a_lab_that_is_not_up_names_etcd_lab_up(tmp_path):
    import lab_variants as variants

    env = variants.make(ROOT / "configs" / "lab.yaml", tmp_path, "skyrackh0", 61)
    failed = run_cli("etcd", "status", str(env))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    [hint] = hints(failed.stdout + failed.stderr)
    cmd, params = parse(hint)
    assert cmd.name == "lab-up" and Path(params["path"]).resolve() == env.resolve(), params


def test_a_bridge_with_no_lab_names_lab_list():
    failed = run_cli("lab", "down", "--bridge", "skyrackh9")
    if "needs root" in failed.stderr:
        pytest.skip("lab down needs root")
    assert failed.returncode == 1, failed.stderr
    [hint] = hints(failed.stderr)
    assert hint == ["lab", "list"]
    assert run_cli(*hint).returncode == 0


def test_a_join_ahead_of_the_control_plane_names_the_upgrade_plan():
    from skyrack import plan as planmod
    from skyrack.join import upgrade

    env = ROOT / "configs" / "lab.yaml"
    target = upgrade.version(planmod.make(env).env.kubernetes.version)
    with pytest.raises(upgrade.UpgradeRefused) as exc:
        upgrade.guard(planmod.make(env), (1, target[1] - 1, 0), [], str(env))
    [hint] = hints(str(exc.value))
    cmd, params = parse(hint)
    assert cmd.name == "upgrade" and params["show_plan"] and Path(params["path"]).resolve() == env.resolve()
    ran = run_cli(*hint)
    assert ran.returncode == 0 and "1. Control plane" in ran.stdout, ran.stderr


# Where each hint in the code is exercised: the module that prints it -> the commands its hints name.
COVERED = {
    "plan.py": {"plan"},  # test_a_stale_lock_names_the_plan_that_fixes_it
    "gitops/compare.py": {"plan"},  # test_the_gate_names_the_plan_that_fixes_a_stale_lock
    "lab/cli.py": {"lab up"},  # test_a_lab_that_is_not_up_names_lab_up (kubeconfig, outputs)
    "lab/fleet.py": {"lab up"},  # test_a_lab_that_is_not_up_names_lab_up (lab fleet up)
    "lab/stacks.py": {"lab up"},  # test_a_lab_that_is_not_up_names_lab_up (lab pulumi)
    "join/driver.py": {"lab up"},  # test_a_lab_that_is_not_up_names_lab_up (join)
    "etcd/cli.py": {"etcd lab-up"},  # test_etcd_of_a_lab_that_is_not_up_names_etcd_lab_up
    "lab/lifecycle.py": {"lab list", "lab up"},  # test_a_bridge_with_no_lab_names_lab_list; ..._names_lab_up (replace)
    "join/upgrade.py": {"upgrade"},  # test_a_join_ahead_of_the_control_plane_names_the_upgrade_plan
    "kube/job_cli.py": {"job delete", "job status"},  # test_a_submitted_job_names_its_status_and_a_name_in_use_delete
}
# Mentions of a command that are not a command to run as printed, each with why.
PROSE = {
    ("gitops/compare.py", "check"): "says which rules of `skyrack check` apply to a tier",
    ("gitops/compare.py", "etcd status"): "an etcd resize's procedure names the check between two replacements "
                                          "(docs/azure.md); tests/gitops/test_diff_changes.py checks the message",
    ("gitops/effects.py", "lab up"): "when the lab's nodes take new user-data",
    ("gitops/effects.py", "join"): "when racks take a change (their next rack run)",
    ("gitops/compare.py", "upgrade"): "a Kubernetes upgrade's review names the command that lists its steps "
                                      "(tests/core/test_upgrade_plan.py runs it)",
    ("join/upgrade.py", "join"): "a node an upgrade left cordoned says which join starts it over "
                                 "(tests/ansible/test_upgrade.py checks the message)",
    ("upgrades.py", "lab replace"): "the lab's control-plane step, with a placeholder for the member "
                                    "(bench/upgrade.py runs it per member)",
    ("upgrades.py", "join"): "the plan's racks step: the command with a placeholder for the outputs file",
    ("gitops/git.py", "diff"): "what `skyrack diff` is for, outside a git repository",
    ("gitops/report_formats.py", "validate"): "a heading of the report",
    ("policies/check.py", "plan"): "a rule's fix, shared by every environment: names the command, not the file",
    ("lab/ssh.py", "lab up"): "a comment in the SSH config the lab writes",
    ("lab/cli.py", "lab list"): "--bridge's help text",
    ("etcd/cli.py", "etcd snapshots"): "--snapshot's help text",
    ("etcd/cli.py", "etcd defrag"): "status's remedy for NOSPACE, which a lab cannot raise within the tests' time (a quota "
                                    "of GiBs to fill); the alarm's handling is tested on the members' script "
                                    "(tests/pulumi/test_etcd_defrag_script.py)",
    ("etcd/ops.py", "etcd status"): "defrag's refusal names the command that shows which member is down "
                                    "(tests/etcd/test_reconfigure.py checks the refusal)",
    ("plan.py", "join"): "the comment the lock file carries over its leaving nodes",
    ("cli.py", "join"): "`plan` says which command releases a leaving node's range",
    ("join/driver.py", "join"): "a failed departure says the next join starts it over; tests/lab/test_join_removal.py "
                                "runs that join",
    ("config/schema.py", "lab up"): "a missing lab site CA says what makes it (`lab up` takes a file that would "
                                    "not load); tests/core/test_site_ca.py checks the message",
    ("lab/hostlimits.py", "lab down"): "the inotify warning says which lab to take down; "
                                       "tests/labhost/test_hostlimits.py checks its text",
}


def test_a_submitted_job_names_its_status_and_a_name_in_use_delete(tmp_path, monkeypatch):
    """`job submit` names `job status` for the job it made, and a name in use names `job delete` for it: the
    same environment, job, team and kubeconfig (the lab test runs both as printed against a real cluster)."""
    import yaml
    from typer.testing import CliRunner

    from skyrack.kube import job_cli
    from skyrack.kube.health import ApiError

    job = tmp_path / "my job.yaml"
    job.write_text(yaml.safe_dump({"name": "llama", "team": "robotics", "image": "r.io/a/b:1", "command": ["x"],
                                   "machines": 2, "gpus_per_machine": 8, "topology": "rack"}))
    env, kubeconfig = ROOT / "configs" / "prod.yaml", tmp_path / "k config"
    present: set[str] = set()

    def call(method: str, path: str, body: dict | None = None, **_kw) -> dict:
        if method == "GET" and path not in present:
            raise ApiError(404, "not found")
        if method == "POST":
            present.add(f"{path}/{body['metadata']['name']}")
        return {}

    monkeypatch.setattr(job_cli, "with_api", lambda given, fn: fn(call))
    args = ["job", "submit", str(env), str(job), "--kubeconfig", str(kubeconfig)]
    for expect, leaf in ((0, "status"), (1, "delete")):  # the second submit finds the name in use
        result = CliRunner().invoke(cli.app, args)
        assert result.exit_code == expect, result.output
        [found] = hints(" ".join(result.output.split()))  # rich may wrap a long line
        cmd, params = parse(found)
        assert cmd.name == leaf and (params["name"], params["team"]) == ("llama", "robotics"), params
        assert Path(params["path"]) == env and params["kubeconfig"] == kubeconfig, params


def test_every_hint_in_the_code_is_covered():
    """Every `skyrack ...` in backticks in code (not a docstring or a comment) has a case above (COVERED) or is
    prose with a reason (PROSE)."""
    pkg = ROOT / "modules" / "skyrack"
    found: set[tuple[str, str]] = set()
    for path in pkg.rglob("*.py"):
        rel = str(path.relative_to(pkg))
        in_doc = False
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.count('"""') == 1:
                in_doc = not in_doc
                continue
            if in_doc or stripped.startswith("#") or stripped.startswith('"""'):
                continue
            for hint in HINT.findall(stripped.split("  # ", 1)[0]):
                words = [w for w in hint.split()[1:3] if re.fullmatch(r"[a-z][a-z-]*", w)]
                if words:
                    found.add((rel, " ".join(words[:2]) if words[0] in ("lab", "etcd", "kube", "job") else words[0]))
    missing = sorted(h for h in found if h not in PROSE and h[1] not in COVERED.get(h[0], set()))
    assert not missing, f"hints with no test case (add one above and to COVERED, or to PROSE with why): {missing}"
    stale = sorted(set(PROSE) - found)
    assert not stale, f"PROSE names mentions that are gone: {stale}"
