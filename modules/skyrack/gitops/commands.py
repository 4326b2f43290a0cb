"""`skyrack diff` and `skyrack check`: the command-line side of the GitOps review.

Registered on the main typer app by `register(app)` (in `skyrack.cli`). Exit codes as
everywhere: 0 ok, 1 danger / a failed rule / bad input, 2 usage.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from ..cliutil import ENVS_HELP, dump_json, env_files, env_path, fail, failure, guarded, ok, out
from ..errors import InputError, Problem
from ..plan import make
from ..policies.check import RULES, run
from . import report_formats
from .git import Repo
from .model import Report
from .review import Side, review


class Format(StrEnum):
    text = "text"
    markdown = "markdown"
    json = "json"


def diff(
    base: Annotated[str, typer.Argument(help="Revision to compare from, e.g. origin/main.")],
    head: Annotated[str | None, typer.Argument(help="Revision to compare to (default: the working tree).")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="Only this environment (repeatable).")] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="text, markdown (a PR comment) or json.")] = Format.text,
    configs: Annotated[Path, typer.Option(help="Directory of the environment files.")] = Path("configs"),
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Text: list every node concerned.")] = False,
    save: Annotated[list[Path] | None, typer.Option(
        "--save", help="Also write the report to this file, in the format its suffix names (.json, .md, .txt); "
                       "repeatable: one comparison, every format CI needs.")] = None,
) -> None:
    """What a change does to each environment between two revisions, with its risk.

    Exit 0 without danger items, 1 with one (or an environment that does not validate).
    """
    def run():
        repo = Repo(Path.cwd(), configs)
        base_side = Side(repo, repo.resolve(base), base, base=True)
        head_side = Side(repo, repo.resolve(head), head) if head else Side(repo, None, "working tree")
        if not any(repo.env_files(side.rev) for side in (base_side, head_side)):
            # a gate that compared nothing must not pass: a wrong --configs, or a checkout without its configs
            where = f"{base} or {head}" if head else f"{base} or in the working tree"
            here = "" if (Path.cwd() / configs).is_dir() else " (and it is no directory here)"
            raise InputError([Problem(str(configs), "", f"no environment file (<name>.yaml) at {where}{here}: "
                                                        "nothing to compare; is --configs right?")])
        return repo, base_side, head_side

    repo, base_side, head_side = guarded(run, fmt == Format.json)
    if env:
        known = {Path(p).stem for side in (base_side, head_side) for p in repo.env_files(side.rev)}
        unknown = sorted(set(env) - known)
        if unknown:
            raise typer.BadParameter(f"no environment {', '.join(unknown)} at either revision "
                                     f"(known: {', '.join(sorted(known)) or 'none'})", param_hint="--env")
    writers = {Format.text: lambda r: report_formats.text(r, verbose), Format.markdown: report_formats.markdown,
               Format.json: report_json}
    by_suffix = {".json": Format.json, ".md": Format.markdown, ".txt": Format.text}
    for path in save or []:
        if path.suffix not in by_suffix:
            raise typer.BadParameter(f"{path}: the suffix names the format: one of {', '.join(by_suffix)}",
                                     param_hint="--save")
    report = review(repo, base_side, head_side, set(env) if env else None)
    for path in save or []:
        path.write_text(writers[by_suffix[path.suffix]](report))
    sys.stdout.write(writers[fmt](report))
    raise typer.Exit(report.exit_code)


def report_json(report: Report) -> str:
    """The review as JSON: `ok` false, with an `error` saying why, when it has a danger item or an invalid environment."""
    doc = report.as_dict()
    if not doc["ok"]:
        doc["error"] = (f"{report.counts['danger']} danger change(s), {len(report.invalid)} environment(s) "
                        "that do not validate")
    return json.dumps(doc, indent=2) + "\n"


def check(
    paths: Annotated[list[Path], typer.Argument(help=ENVS_HELP, parser=env_path, metavar="ENV...")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")] = False,
) -> None:
    """Policy rules beyond schema validity (production redundancy, exposure, quotas, versions).

    Exit 1 when a rule of severity error fails (or a file does not validate).
    """
    results, problems = [], []
    for path in env_files(paths or []):
        try:
            plan = make(path)
        except InputError as exc:
            problems += exc.problems
            continue
        findings = run(plan)
        results.append({"file": str(path), "environment": plan.env.name, "tier": plan.env.tier,
                        "ok": not any(f.severity == "error" for f in findings),
                        "findings": [f.as_dict() for f in findings]})
    failed = bool(problems) or not all(r["ok"] for r in results)
    if as_json:
        rules = [{"id": r.id, "severity": r.severity, "summary": r.summary} for r in RULES]
        broken = [f"{r['file']}: {f['rule']}: {f['field']}: {f['message']}" for r in results for f in r["findings"]
                  if f["severity"] == "error"]
        if failed:
            dump_json(failure(problems, "\n".join([*map(str, problems), *broken]), rules=rules, results=results))
        else:
            dump_json(ok(rules=rules, results=results, problems=[]))
        raise typer.Exit(1 if failed else 0)
    for r in results:
        errors = sum(f["severity"] == "error" for f in r["findings"])
        warnings = len(r["findings"]) - errors
        out.print(f"{r['file']}: {r['environment']} ({r['tier']}): {len(RULES)} rules, "
                  f"{errors} error(s), {warnings} warning(s)", markup=False)
        for f in r["findings"]:
            out.print(f"  {f['severity']:<7} {f['rule']}: {f['field']}: {f['message']}", markup=False)
            out.print(f"          fix: {f['fix']}", markup=False)
    if problems:
        raise fail(problems)
    raise typer.Exit(1 if failed else 0)


def register(app: typer.Typer) -> None:
    app.command("diff")(diff)
    app.command("check")(check)
