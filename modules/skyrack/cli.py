"""The `skyrack` command line.

Exit codes everywhere: 0 ok, 1 the input or the run is wrong (every problem printed as
``file: field: message``), 2 usage, 3 an internal error (a bug in skyrack, never a verdict
on the input). Bad input never prints a traceback; every value and path printed goes
through `safe` (no Rich markup, no control characters reach the terminal).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from . import config, inventory
from . import outputs as contract
from . import plan as planmod
from .errors import EXIT_INPUT, EXIT_INTERNAL, InputError, Problem
from .term import safe

DEFAULT_ENV = Path("configs/lab.yaml")
app = typer.Typer(
    name="skyrack",
    help="Provision hybrid Kubernetes clusters: Azure control plane, on-prem GPU racks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
out = Console(highlight=False, soft_wrap=True, emoji=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

EnvArg = Annotated[Path, typer.Argument(help="Environment file, configs/<env>.yaml.", show_default=True)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
T = TypeVar("T")


def fail(problems: list[Problem], as_json: bool = False) -> typer.Exit:
    """Report problems (stderr, or a JSON document on stdout) and return Exit(1) to raise."""
    if as_json:
        print(json.dumps({"ok": False, "problems": [p.as_dict() for p in problems]}, indent=2))
    else:
        for p in problems:
            err.print(f"[red]error[/red] {safe(p)}", markup=True, highlight=False)
    return typer.Exit(EXIT_INPUT)


def guarded(fn: Callable[[], T], as_json: bool = False, errors: tuple[type[Exception], ...] = ()) -> T:
    """Run fn; report InputError (file: field: message) or one of `errors` (a run that went wrong)
    without a traceback, and exit 1."""
    try:
        return fn()
    except InputError as exc:
        raise fail(exc.problems, as_json) from None
    except typer.Exit:
        raise  # click's Exit is a RuntimeError: never report it as a failure of its own
    except errors as exc:
        if as_json:
            dump_json({"ok": False, "error": str(exc)})
        else:
            err.print(f"[red]error[/red] {safe(exc)}")
        raise typer.Exit(EXIT_INPUT) from None


def dump_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


@app.command()
def validate(
    paths: Annotated[list[Path] | None, typer.Argument(help="Environment files (default: configs/lab.yaml).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check environment files; list every problem as `file: field: what is wrong`."""
    files = [p for p in (paths or [DEFAULT_ENV]) if not p.name.endswith(".lock.yaml")]
    problems: list[Problem] = []
    valid = []
    for path in files:
        try:
            env = config.load(path)
            valid.append({"file": str(path), "name": env.name, "nodes": len(env.rack_nodes)})
        except InputError as exc:
            problems.extend(exc.problems)
    if as_json:
        dump_json({"ok": not problems, "valid": valid, "problems": [p.as_dict() for p in problems]})
        raise typer.Exit(1 if problems else 0)
    if problems:
        raise fail(problems)
    for v in valid:
        out.print(f"{safe(v['file'])}: valid ({v['name']}, {v['nodes']} on-prem nodes)")


@app.command()
def plan(
    path: EnvArg = DEFAULT_ENV,
    as_json: JsonOpt = False,
    locked: Annotated[bool, typer.Option("--locked", help="Fail instead of writing when the lock file would change (CI).")] = False,
) -> None:
    """Derive the plan (pod ranges, sizes, subnets, per-node variables) and update the lock file."""
    p = guarded(lambda: planmod.make(path, require_lock=locked), as_json)
    wrote = False if locked else guarded(lambda: planmod.write_lock(p), as_json)
    if as_json:
        data = p.to_dict()
        data["lock"]["written"] = wrote
        dump_json(data)
        return
    print_plan(p, wrote)


def print_plan(p: planmod.Plan, wrote: bool) -> None:
    env, sz = p.env, p.sizing
    out.print(f"[bold]{safe(env.name)}[/bold] ({safe(p.source)}): {len(p.nodes)} on-prem nodes in {len(env.racks)} "
              f"racks, {env.cloud_max_nodes} cloud pool nodes at most; Kubernetes {safe(env.kubernetes.version)}")
    out.print(f"API servers: {env.control_plane.apiservers.count} x {safe(sz.apiserver_vm_size)} "
              f"(model: {sz.apiserver_heap_gib} GiB heap, {sz.apiserver_memory_gib} GiB needed for {sz.nodes} nodes)")
    events = " + events cluster" if env.control_plane.etcd.events_cluster else ""
    out.print(f"etcd: {env.control_plane.etcd.count} x {safe(sz.etcd_vm_size)}{events} "
              f"(quota {env.control_plane.etcd.quota_backend_gib} GiB, local NVMe)")
    out.print(f"API endpoint: {safe(p.apiserver_endpoint)}")
    table("VNet " + ", ".join(p.vnet_address_space), ("subnet", "cidr"), p.subnets.items())
    table("Control plane", ("member", "role", "ip", "zone", "size"),
          ((m.name, m.role, m.ip, m.zone or "-", m.vm_size) for m in p.members))
    if p.pools:
        table("Cloud pools", ("pool", "size", "min", "max", "pod range"),
              ((q.name, q.vm_size, q.min, q.max, q.pod_cidr) for q in p.pools))
    racks: dict[str, list[planmod.NodeVars]] = {}
    for n in p.nodes:
        racks.setdefault(n.rack, []).append(n)
    table("Racks", ("rack", "team", "gpus", "nodes", "first node", "pod ranges"),
          ((name, nodes[0].team or "-", f"{nodes[0].gpu_count} x {nodes[0].gpu_model}" if nodes[0].gpu_model else "-",
            len(nodes), f"{nodes[0].name} {nodes[0].ip}", f"{nodes[0].pod_cidr} ..") for name, nodes in racks.items()))
    pod_ips = sum(2 ** (32 - int(n.pod_cidr.split("/")[1])) for n in p.nodes)
    out.print(f"Pod addresses allocated on-prem: {pod_ips:,} (capacity {len(p.nodes) * p.max_pods:,} pods)")
    a = p.allocation
    if not a.changed:
        out.print(f"Lock {safe(p.lock_path)}: up to date")
    else:
        verb = "written" if wrote else "would change"
        out.print(f"Lock {safe(p.lock_path)}: {verb}: +{len(a.added)} allocated, -{len(a.released)} released, "
                  f"{len(a.moved)} moved" + (f" ({safe(a.reason)})" if a.reason else ""))


def table(title: str, columns: tuple[str, ...], rows: Any) -> None:
    """Print a table; every cell goes through `safe`."""
    t = Table(*columns, title=safe(title), title_justify="left")
    for row in rows:
        t.add_row(*(safe(c) for c in row))
    out.print(t)


@app.command("inventory")
def inventory_cmd(
    path: EnvArg = DEFAULT_ENV,
    as_json: Annotated[bool, typer.Option("--json", help="Ansible dynamic-inventory JSON (`--list` format).")] = False,
    outputs: Annotated[Path | None, typer.Option(help="Control-plane outputs (JSON, `pulumi stack output --json`).")] = None,
) -> None:
    """Print the Ansible inventory of the on-prem racks (YAML, or dynamic-inventory JSON).

    Secret outputs never enter it (`skyrack join` hands the ones it needs to Ansible itself)."""
    p = guarded(lambda: planmod.make(path))
    outs = None
    if outputs:
        public, secret = contract.split_secrets(guarded(lambda: contract.validate(contract.read_file(outputs), outputs)))
        outs = public
        if secret:
            err.print(f"secret outputs left out of the inventory: {safe(', '.join(secret))}")
    if as_json:
        dump_json(inventory.dynamic(p, outs))
    else:
        sys.stdout.write(inventory.dump_yaml(inventory.static(p, outs)))


def main() -> None:
    """The entry point: a bug is exit 3 with one line (SKYRACK_DEBUG=1: the traceback), never exit 1."""
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("SKYRACK_DEBUG"):
            raise
        err.print(f"[red]internal error[/red] {safe(type(exc).__name__)}: {safe(str(exc)[:500])} (a bug in skyrack, "
                  "not a verdict on the input; SKYRACK_DEBUG=1 shows the traceback)")
        sys.exit(EXIT_INTERNAL)


# Commands of the edges register after the core's, each from its own module.
from .etcd.cli import app as _etcd_app  # noqa: E402
from .gitops.commands import register as _register_gitops  # noqa: E402 - `skyrack diff`, `skyrack check`
from .join.cli import join as _join  # noqa: E402
from .kube.cli import app as _kube_app  # noqa: E402
from .lab.cli import app as _lab_app  # noqa: E402

_register_gitops(app)
app.add_typer(_lab_app, name="lab")
app.command("join")(_join)
app.add_typer(_etcd_app, name="etcd")
app.add_typer(_kube_app, name="kube")

if __name__ == "__main__":
    main()
