"""`skyrack lab up|status|down|stop`: the local lab's command line (see docs/lab.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..cli import DEFAULT_ENV, EnvArg, JsonOpt, dump_json, err, guarded, out
from . import lifecycle

app = typer.Typer(help="The local lab: every host of a lab environment as a systemd-nspawn node.",
                  no_args_is_help=True)


def _run(fn, as_json: bool = False):
    return guarded(fn, as_json, (lifecycle.LabError,))


def read_seeds(seed_dir: Path | None) -> dict[str, str]:
    """`<dir>/<host>.yaml` is that host's cloud-init user-data."""
    if seed_dir is None:
        return {}
    if not seed_dir.is_dir():
        from ..errors import InputError, Problem

        raise InputError([Problem(str(seed_dir), "", "not a directory of <host>.yaml user-data files")])
    return {p.stem: p.read_text() for p in sorted(seed_dir.glob("*.yaml"))}


@app.command()
def up(
    path: EnvArg = DEFAULT_ENV,
    seed_dir: Annotated[Path | None, typer.Option(help="Directory of <host>.yaml cloud-init user-data "
                                                       "(NoCloud seed, read at a node's first boot).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Start every host of the environment (idempotent; recovers after a crash)."""
    say = (lambda _m: None) if as_json else (lambda m: err.print(f"[bold]lab[/bold] {m}"))
    _run(lambda: lifecycle.up(path, read_seeds(seed_dir), say=say), as_json)
    show(path, as_json)


@app.command()
def status(path: EnvArg = DEFAULT_ENV, as_json: JsonOpt = False) -> None:
    """Show the lab's hosts (running, SSH answering), bridge, rules and apt proxy."""
    st = show(path, as_json)
    if not st["up"] or not all(h["running"] for h in st["hosts"]):
        raise typer.Exit(1)


def show(path: Path, as_json: bool) -> dict:
    st = _run(lambda: lifecycle.status(path), as_json)
    if as_json:
        dump_json(st)
        return st
    if not st["up"]:
        out.print(f"lab {st['environment']}: down")
        return st
    t = Table("host", "role", "ip", "running", "ssh", title=f"lab {st['environment']} ({st['state_dir']})",
              title_justify="left")
    for h in st["hosts"]:
        t.add_row(h["name"], h["role"], h["ip"], "yes" if h["running"] else "[red]no[/red]",
                  "yes" if h["ssh"] else "[red]no[/red]")
    out.print(t)
    out.print(f"bridge: {'up' if st['bridge'] else 'missing'}; forwarding DROP rules: "
              f"{'in place' if st['rules'] else 'missing'}; apt proxy: {st['apt_proxy'] or 'not running'}")
    out.print(f"ssh: ssh -F {st['ssh_config']} <host>")
    return st


@app.command()
def down(path: EnvArg = DEFAULT_ENV) -> None:
    """Remove everything `up` made: nodes, their disks, the proxy, rules, bridge, state."""
    _run(lambda: lifecycle.down(path, say=lambda m: err.print(f"[bold]lab[/bold] {m}")))
    out.print("lab down")


@app.command()
def stop(host: Annotated[str, typer.Argument(help="Host to power off (`up` boots it again).")],
         path: EnvArg = DEFAULT_ENV) -> None:
    """Power one host off, keeping its disk (to test failures)."""
    _run(lambda: lifecycle.stop_host(path, host))
    out.print(f"{host} stopped")
