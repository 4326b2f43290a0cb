"""The `skyrack` command line.

Exit codes everywhere: 0 ok, 1 the input or the run is wrong (every problem printed as
``file: field: message``), 2 usage. Bad input never prints a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml
from rich.console import Console
from rich.table import Table

from . import config, inventory
from . import plan as planmod
from .errors import InputError, Problem

DEFAULT_ENV = Path("configs/lab.yaml")
YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
app = typer.Typer(
    name="skyrack",
    help="Provision hybrid Kubernetes clusters: Azure control plane, on-prem GPU racks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EnvArg = Annotated[Path, typer.Argument(help="Environment file, configs/<env>.yaml.", show_default=True)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
T = TypeVar("T")


def fail(problems: list[Problem], as_json: bool = False) -> typer.Exit:
    """Report problems (stderr, or a JSON document on stdout) and return Exit(1) to raise."""
    if as_json:
        print(json.dumps({"ok": False, "problems": [p.as_dict() for p in problems]}, indent=2))
    else:
        for p in problems:
            err.print(f"[red]error[/red] {p}", markup=True, highlight=False)
    return typer.Exit(1)


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
            err.print(f"[red]error[/red] {exc}")
        raise typer.Exit(1) from None


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
        out.print(f"{v['file']}: valid ({v['name']}, {v['nodes']} on-prem nodes)")


@app.command()
def plan(
    path: EnvArg = DEFAULT_ENV,
    as_json: JsonOpt = False,
    locked: Annotated[bool, typer.Option("--locked", help="Fail instead of writing when the lock file would change (CI).")] = False,
) -> None:
    """Derive the plan (pod ranges, sizes, subnets, per-node variables) and update the lock file."""
    p = guarded(lambda: planmod.make(path, require_lock=locked), as_json)
    wrote = False if locked else planmod.write_lock(p)
    if as_json:
        data = p.to_dict()
        data["lock"]["written"] = wrote
        dump_json(data)
        return
    print_plan(p, wrote)


def print_plan(p: planmod.Plan, wrote: bool) -> None:
    env, sz = p.env, p.sizing
    out.print(f"[bold]{env.name}[/bold] ({p.source}): {len(p.nodes)} on-prem nodes in {len(env.racks)} racks, "
              f"{env.cloud_max_nodes} cloud pool nodes at most; Kubernetes {env.kubernetes.version}")
    out.print(f"API servers: {env.control_plane.apiservers.count} x {sz.apiserver_vm_size} "
              f"(model: {sz.apiserver_heap_gib} GiB heap, {sz.apiserver_memory_gib} GiB needed for {sz.nodes} nodes)")
    events = " + events cluster" if env.control_plane.etcd.events_cluster else ""
    out.print(f"etcd: {env.control_plane.etcd.count} x {sz.etcd_vm_size}{events} "
              f"(quota {env.control_plane.etcd.quota_backend_gib} GiB, local NVMe)")
    out.print(f"API endpoint: {p.apiserver_endpoint}")
    t = Table("subnet", "cidr", title="VNet " + ", ".join(p.vnet_address_space), title_justify="left")
    for name, cidr in p.subnets.items():
        t.add_row(name, cidr)
    out.print(t)
    t = Table("member", "role", "ip", "zone", "size", title="Control plane", title_justify="left")
    for m in p.members:
        t.add_row(m.name, m.role, m.ip, m.zone or "-", m.vm_size)
    out.print(t)
    if p.pools:
        t = Table("pool", "size", "min", "max", "pod range", title="Cloud pools", title_justify="left")
        for pool in p.pools:
            t.add_row(pool.name, pool.vm_size, str(pool.min), str(pool.max), pool.pod_cidr)
        out.print(t)
    racks: dict[str, list[planmod.NodeVars]] = {}
    for n in p.nodes:
        racks.setdefault(n.rack, []).append(n)
    t = Table("rack", "team", "gpus", "nodes", "first node", "pod ranges", title="Racks", title_justify="left")
    for name, nodes in racks.items():
        gpu = f"{nodes[0].gpu_count} x {nodes[0].gpu_model}" if nodes[0].gpu_model else "-"
        t.add_row(name, nodes[0].team or "-", gpu, str(len(nodes)), f"{nodes[0].name} {nodes[0].ip}",
                  f"{nodes[0].pod_cidr} ..")
    out.print(t)
    pod_ips = sum(2 ** (32 - int(n.pod_cidr.split("/")[1])) for n in p.nodes)
    out.print(f"Pod addresses allocated on-prem: {pod_ips:,} (capacity {len(p.nodes) * env.kubernetes.pods_per_node:,} pods)")
    a = p.allocation
    if not a.changed:
        out.print(f"Lock {p.lock_path}: up to date")
    else:
        verb = "written" if wrote else "would change"
        out.print(f"Lock {p.lock_path}: {verb}: +{len(a.added)} allocated, -{len(a.released)} released, "
                  f"{len(a.moved)} moved" + (f" ({a.reason})" if a.reason else ""))


@app.command("inventory")
def inventory_cmd(
    path: EnvArg = DEFAULT_ENV,
    as_json: Annotated[bool, typer.Option("--json", help="Ansible dynamic-inventory JSON (`--list` format).")] = False,
    outputs: Annotated[Path | None, typer.Option(help="Control-plane outputs (JSON, `pulumi stack output --json`).")] = None,
) -> None:
    """Print the Ansible inventory of the on-prem racks (YAML, or dynamic-inventory JSON)."""
    p = guarded(lambda: planmod.make(path))
    outs = guarded(lambda: read_outputs(outputs)) if outputs else None
    if as_json:
        dump_json(inventory.dynamic(p, outs))
    else:
        sys.stdout.write(yaml.dump(inventory.static(p, outs), Dumper=YAML_DUMPER, sort_keys=False, width=200))


def read_outputs(path: Path) -> dict[str, Any]:
    """Read `pulumi stack output --json` (or an equivalent file)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError([Problem(str(path), "", "no such file")]) from None
    except json.JSONDecodeError as exc:
        raise InputError([Problem(str(path), f"line {exc.lineno}", f"invalid JSON: {exc.msg}")]) from None
    if not isinstance(data, dict):
        raise InputError([Problem(str(path), "", "expected a JSON object of stack outputs")])
    return data


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


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
