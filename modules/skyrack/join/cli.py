"""`skyrack join`: the command line of the rack join (see docs/join.md)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from ..cliutil import DEFAULT_ENV, EnvArg, JsonOpt, err, guarded, out
from ..term import safe
from . import departures, driver, fleet, upgrade
from .progress import error_lines, skipped_table, summary_table


class Via(StrEnum):
    local = "local"
    receptor = "receptor"


def join(
    path: EnvArg = DEFAULT_ENV,
    rack: Annotated[str | None, typer.Option(help="Only this rack (default: every rack, in file order).")] = None,
    limit: Annotated[str | None, typer.Option(help="Only these hosts (comma-separated node names).")] = None,
    check: Annotated[bool, typer.Option("--check", help="Dry run: report what would change, change nothing.")] = False,
    outputs: Annotated[Path | None, typer.Option(help="Control-plane outputs: `pulumi stack output --json "
                                                      "--show-secrets` (without: the join step is skipped).")] = None,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Run again only the hosts that failed or were "
                                                                      "unreachable in each rack's last run.")] = False,
    tags: Annotated[str | None, typer.Option(help="Only these roles (comma-separated; a role's tag is its name, "
                                                  "e.g. kubelet,kubeadm_join).")] = None,
    runs_dir: Annotated[Path, typer.Option(help="Where run records are kept.")] = Path("runs"),
    keep_runs: Annotated[int, typer.Option(min=1, help="Run records kept per rack; older ones are removed "
                                                       "after each run, oldest first.")] = driver.JoinOptions.keep_runs,
    via: Annotated[Via, typer.Option(help="Where each rack's run executes: here, or on the execution node the "
                                          "environment's `execution:` section names for it (Receptor).")] = Via.local,
    parallel: Annotated[int | None, typer.Option(
        min=1, help="Racks at once, after a first (canary) rack alone [default: the file's join.parallel, or 1].")
    ] = None,
    canary: Annotated[bool | None, typer.Option(
        "--canary/--no-canary", help="Run the first rack alone first; its failure starts no other "
                                     "[default: the file's join.canary, or yes].", show_default=False)] = None,
    joins_per_minute: Annotated[int | None, typer.Option(
        min=1, help="Bound on kubeadm joins per minute the control plane is given (racks start no faster) "
                    f"[default: the file's join.joins_per_minute, or {fleet.DEFAULT_JOINS_PER_MINUTE}].")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Prepare and join racks' workers with Ansible (a canary rack, then --parallel at once); exit 1 if any host failed."""
    opts = driver.JoinOptions(rack=rack, limit=[h.strip() for h in limit.split(",") if h.strip()] if limit else None,
                              check=check, outputs=outputs, retry_failed=retry_failed, runs_dir=runs_dir,
                              tags=[t.strip() for t in tags.split(",") if t.strip()] if tags else None, keep_runs=keep_runs,
                              parallel=parallel, canary=canary, joins_per_minute=joins_per_minute, via=via.value)

    def said(run: driver.RackRun) -> None:
        err.print(f"rack {safe(run.rack)}: {len(run.hosts)} host(s) in {run.seconds} s, "
                  f"{len(run.failed_hosts)} failed; record {safe(run.record)}")

    result = guarded(lambda: driver.join_fleet(path, opts, err, on_rack=said), as_json,
                     (departures.LeaveFailed, upgrade.UpgradeRefused))
    runs = result.runs
    if not runs:
        what = "no failed hosts to retry" if retry_failed else "no hosts selected"
        err.print(f"{what}: nothing to do")
        if as_json:
            print(driver.summary_json(result))
        return
    bad = any(fleet.failed(r) for r in runs)
    if as_json:
        print(driver.summary_json(result))
    else:
        out.print(summary_table(runs))
        skipped = skipped_table([h for r in runs for h in r.hosts])
        if skipped is not None:
            out.print(skipped)
        for line in error_lines(runs):
            out.print(f"[red]{line}[/red]", markup=True)
        failed = [h for r in runs for h in r.failed_hosts]
        if result.not_started:
            out.print(f"[red]not started after rack {safe(result.stopped_by)} failed: "
                      f"{safe(', '.join(result.not_started))}[/red]")
        if failed:
            out.print(f"[red]failed: {safe(', '.join(failed))}[/red]; after fixing, run again with --retry-failed")
        elif check:
            out.print("check mode: nothing was changed on the hosts")
    if bad:
        raise typer.Exit(1)
