"""The command line's common conventions, on every command: naming an environment, `--json`,
`--version`, choices.

Commands are found by walking the command tree, so a command added later is checked too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version

import pytest
import typer
import yaml
from typer.testing import CliRunner

from skyrack import cli
from support import CONFIGS, ROOT, run_cli

ENV_METAVARS = ("ENV", "ENV...")


def commands() -> list[tuple[tuple[str, ...], object]]:
    """(name path, click command) of every leaf command."""
    out = []

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, (*path, name))
        else:
            out.append((path, cmd))

    walk(typer.main.get_command(cli.app), ())
    return out


def env_args(cmd, env: str) -> list[str] | None:
    """Arguments that give `env` as the command's environment (None: it takes none)."""
    args, named = [], False
    for p in cmd.params:
        if p.param_type_name == "argument":
            if p.metavar in ENV_METAVARS:
                args.append(env)
                named = True
            else:
                args.append("x")
        elif "--env" in p.opts and not p.multiple:  # `lab kubectl --env`; `diff --env` filters by name
            args += ["--env", env]
            named = True
    return args if named else None


def has_json(cmd) -> bool:
    return any("--json" in p.opts for p in cmd.params)


ENV_COMMANDS = [(path, cmd) for path, cmd in commands() if env_args(cmd, "lab") is not None]
JSON_COMMANDS = [(path, cmd) for path, cmd in commands() if has_json(cmd)]


def invoke(*args: str):
    return CliRunner().invoke(cli.app, list(args), catch_exceptions=False, env={"COLUMNS": "200", "NO_COLOR": "1"})


# what a command needs besides its environment to get as far as reading it
NEEDS = {("etcd", "restore"): ["--yes"], ("etcd", "replace-member"): ["--member", "etcd-1"],
         ("job", "status"): ["--team", "robotics"], ("job", "delete"): ["--team", "robotics"]}


def test_the_walk_finds_the_commands():
    names = {" ".join(p) for p, _ in ENV_COMMANDS}
    assert {"validate", "plan", "inventory", "check", "join", "kube manifests", "kube scheduler-config",
            "lab up", "lab status", "lab kubectl", "etcd status", "etcd restore"} <= names
    assert {"validate", "plan", "inventory", "check", "join", "kube manifests", "lab status", "etcd snapshots"} <= {
        " ".join(p) for p, _ in JSON_COMMANDS}


# ----------------------------------------------------------------------------- one way to name an environment


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A directory like the repository: configs/ with dev and lab, and a `./dev` script beside it."""
    (tmp_path / "configs").mkdir()
    for name in ("dev.yaml", "dev.lock.yaml", "lab.yaml", "lab.lock.yaml", "Pulumi.dev.yaml"):
        if (CONFIGS / name).exists():
            shutil.copy(CONFIGS / name, tmp_path / "configs" / name)
    (tmp_path / "dev").write_text("#!/bin/sh\n# the developer script, not YAML: [unclosed\nset -eu\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_name_is_its_file_in_configs_not_a_file_of_that_name(repo):
    proc = run_cli("validate", "dev", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "configs/dev.yaml: valid (dev, 4 on-prem nodes)\n"
    assert run_cli("kube", "manifests", "dev", cwd=repo).returncode == 0  # the README's `kube manifests <env>`


def test_a_path_that_is_not_a_yaml_file_is_never_read(repo):
    proc = run_cli("validate", "./dev", cwd=repo)
    assert proc.returncode == 1
    assert proc.stderr == ("error ./dev: name: an environment file is named dev.yaml, not 'dev': give an "
                           "environment's name (configs/<name>.yaml) or its .yaml file\n")
    assert "YAML" not in proc.stderr and "Traceback" not in proc.stderr


def test_the_same_names_everywhere(repo):
    """Every command that takes an environment resolves a name the same way, before it does anything."""
    for path, cmd in ENV_COMMANDS:
        result = invoke(*path, *env_args(cmd, "nosuch"))
        assert result.exit_code == 1, (path, result.output)
        assert result.stderr.startswith("error nosuch: no environment 'nosuch': configs/nosuch.yaml does not exist "
                                        "(environments in configs/: dev, lab; "), (path, result.stderr)


def test_a_path_still_names_any_file(repo):
    elsewhere = repo / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(CONFIGS / "dev.yaml", elsewhere / "dev.yaml")
    shutil.copy(CONFIGS / "dev.lock.yaml", elsewhere / "dev.lock.yaml")
    assert run_cli("validate", "elsewhere/dev.yaml", cwd=repo).returncode == 0
    result = invoke("plan", "--json", "elsewhere/dev.yaml")
    assert result.exit_code == 0 and json.loads(result.stdout)["source"].endswith("elsewhere/dev.yaml")


def test_validate_and_check_skip_the_same_files_of_a_glob(repo):
    files = sorted(str(p.relative_to(repo)) for p in (repo / "configs").iterdir())
    assert "configs/Pulumi.dev.yaml" in files and "configs/dev.lock.yaml" in files
    validated = json.loads(invoke("validate", "--json", *files).stdout)
    assert [v["file"] for v in validated["valid"]] == ["configs/dev.yaml", "configs/lab.yaml"]
    checked = json.loads(invoke("check", "--json", *files).stdout)
    assert [r["file"] for r in checked["results"]] == ["configs/dev.yaml", "configs/lab.yaml"]


# ----------------------------------------------------------------------------- --json: `ok`, on success and failure


@pytest.mark.parametrize("path", [p for p, c in JSON_COMMANDS if env_args(c, "lab") is not None], ids=lambda p: " ".join(p))
def test_every_json_command_reports_a_bad_environment_as_json(tmp_path, path):
    cmd = dict(JSON_COMMANDS)[path]
    missing = str(tmp_path / "dev.yaml")
    result = invoke(*path, *env_args(cmd, missing), *NEEDS.get(path, []), "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    assert doc["error"] == f"{missing}: no such file"
    assert doc["problems"] == [{"file": missing, "path": "", "message": "no such file"}]


def test_an_invalid_environment_as_json(tmp_path):
    bad = tmp_path / "dev.yaml"
    bad.write_text((CONFIGS / "dev.yaml").read_text().replace("count: 3", "count: 4", 2))
    for args in (["inventory"], ["kube", "manifests"], ["plan"], ["validate"], ["check"]):
        result = invoke(*args, str(bad), "--json")
        assert result.exit_code == 1, (args, result.output)
        doc = json.loads(result.stdout)
        assert doc["ok"] is False and "control_plane.etcd.count: 4 is even" in doc["error"], (args, doc)


def test_usage_errors_as_json():
    for args in (["validate", "--no-such-flag", "--json"], ["no-such-command", "--json"],
                 ["etcd", "status", "dev", "--cluster", "etcd-x", "--json"],
                 ["etcd", "restore", "dev", "--json"]):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        doc = json.loads(result.stdout)
        assert doc["ok"] is False and doc["error"], (args, doc)
    proc = run_cli("validate", "--no-such-flag")  # without --json: click's usage message on stderr
    assert proc.returncode == 2 and proc.stdout == "" and "No such option: --no-such-flag" in proc.stderr


def test_an_internal_error_as_json():
    code = ("import sys; from skyrack import cli, plan\n"
            "def bug(*a, **k): raise ZeroDivisionError('a bug')\n"
            "plan.make = bug; sys.argv = ['skyrack', 'plan', 'configs/dev.yaml', '--json']; cli.main()\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "modules")})
    assert proc.returncode == 3
    assert json.loads(proc.stdout) == {"ok": False, "error": "internal error ZeroDivisionError: a bug"}


@pytest.mark.parametrize("args", [["validate", "dev"], ["plan", "dev"], ["check", "dev"], ["kube", "manifests", "dev"]],
                         ids=" ".join)
def test_success_as_json_says_ok(args):
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True


def test_plan_json_keeps_its_keys():
    doc = json.loads(invoke("plan", "dev", "--json").stdout)
    assert next(iter(doc)) == "ok"
    assert {"environment", "lock", "nodes", "members"} <= set(doc), sorted(doc)


def test_inventory_json_stays_ansible_dynamic_inventory():
    """The one `--json` without `ok` on success: Ansible reads it, and a key `ok` would be a group."""
    doc = json.loads(invoke("inventory", "dev", "--json").stdout)
    assert "ok" not in doc and "_meta" in doc


# ----------------------------------------------------------------------------- --version, choices


def test_version_comes_from_the_package_metadata():
    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout == f"skyrack {version('skyrack')}\n"


def test_one_version_the_collections_repeat():
    """skyrack.__version__ is the one source (pyproject reads it); the Ansible collections' galaxy.yml must
    carry a version of their own for `ansible-galaxy collection build`, and it is the same."""
    import skyrack

    assert version("skyrack") == skyrack.__version__
    for galaxy in sorted((ROOT / "ansible").rglob("galaxy.yml")):
        assert yaml.safe_load(galaxy.read_text())["version"] == skyrack.__version__, galaxy


def test_cluster_accepts_only_the_known_clusters():
    proc = run_cli("etcd", "status", "dev", "--cluster", "etcd-x")
    assert proc.returncode == 2
    assert "'etcd-x' is not one of 'etcd', 'etcd-events'" in proc.stderr
    with_cluster = [(path, cmd) for path, cmd in ENV_COMMANDS if any("--cluster" in p.opts for p in cmd.params)]
    assert len(with_cluster) == 6, with_cluster  # status, defrag, snapshot, snapshots, restore, replace-member
    for path, cmd in with_cluster:
        result = invoke(*path, *env_args(cmd, "dev"), "--cluster", "etcd-x")
        assert result.exit_code == 2 and "is not one of 'etcd', 'etcd-events'" in result.stderr, (path, result.output)


def _readme_commands() -> list[tuple[str, str]]:
    """(usage cell, the doc it links or '') of every `skyrack ...` row of the README's command table."""
    rows = []
    for line in (ROOT / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.replace("\\|", "\0").split("|")[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`skyrack "):
            link = cells[2].split("](", 1)[1].split(")", 1)[0] if "](" in cells[2] else ""
            rows.append((cells[0].replace("\0", "|"), link))
    return rows


def test_the_readme_command_table_names_every_command_and_flag():
    """Every command of the tree (walked, so a new one is checked too) is in the README's table, and each of
    its flags is in its row or in the document the row links (`--json` is documented once for all)."""
    rows = _readme_commands()
    missing = []
    for path, cmd in commands():
        group, leaf = (path[0], path[-1]) if len(path) > 1 else (None, path[0])
        row = next(((usage, doc) for usage, doc in rows
                    if (words := usage.strip("`").split())[1] == (group or leaf)
                    and (group is None or leaf in words[2].split("|"))), None)
        if row is None:
            missing.append(f"skyrack {' '.join(path)}: no row")
            continue
        usage, doc = row
        text = usage + ((ROOT / doc).read_text() if doc else "")
        for param in cmd.params:
            flags = [o for o in param.opts if o.startswith("--")]
            if param.param_type_name == "option" and flags and flags[0] != "--json" and not param.hidden \
                    and not any(f in text for f in flags):
                missing.append(f"skyrack {' '.join(path)} {flags[0]}: not in its row or {doc or 'any linked doc'}")
    assert not missing, "\n".join(missing)


def test_lab_build_refuses_site_with_conformance_and_builds_nothing(tmp_path):
    cache = tmp_path / "cache"
    proc = run_cli("lab", "build", "--site", "--conformance", env={"SKYRACK_CACHE": str(cache)})
    assert proc.returncode == 2, proc.stderr
    assert "--site" in proc.stderr and "--conformance" in proc.stderr and "choose one" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not cache.exists()
