"""The `skyrack` command line.

Exit codes everywhere: 0 ok, 1 the input or the run is wrong (every problem printed as
``file: field: message``), 2 usage, 3 an internal error (a bug in skyrack, never a verdict
on the input). Bad input never prints a traceback; every value and path printed goes
through `safe` (no Rich markup, no control characters reach the terminal).

The top of the package: it registers the edges' commands (`lab`, `join`, `etcd`, `kube`, `job`,
`diff`, `check`), each defined in its own module, and nothing imports it. What the
commands share (naming an environment, `--json`, reporting errors) is `skyrack.cliutil`.
"""

from __future__ import annotations

import itertools
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from . import config, inventory
from . import outputs as contract
from . import plan as planmod
from .cliutil import DEFAULT_ENV, EnvArg, EnvsArg, JsonOpt, dump_json, env_files, err, fail, failure, guarded, ok, out
from .errors import EXIT_INTERNAL, EXIT_USAGE, InputError, Problem
from .etcd.cli import app as etcd_app
from .gitops.commands import register as register_gitops
from .join.cli import join
from .kube.cli import app as kube_app
from .kube.job_cli import app as job_app
from .lab.cli import app as lab_app
from .term import safe

# click's UsageError, the base of typer.BadParameter (typer >= 0.29 carries its own copy of click)
UsageError: type[Exception] = typer.BadParameter.__mro__[1]


def package_version() -> str:
    try:
        return version("skyrack")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def wants_json(args: list[str]) -> bool:
    """The command asked for JSON (`--json`, or `diff --format json`), judged from its arguments."""
    args = args[:args.index("--")] if "--" in args else args
    return "--json" in args or any(a in ("--format=json", "-fjson") for a in args) or any(
        a in ("--format", "-f") and b == "json" for a, b in itertools.pairwise(args))


class Group(typer.core.TyperGroup):
    """The root command: errors found while the arguments are read are reported like any other.

    An environment that is not there (`env_path`) is an input error: exit 1, `file: message`. A
    usage error is exit 2. With `--json` both are a JSON document on stdout: `ok` false, `error`.
    """

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        ctx.meta["skyrack.json"] = wants_json(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: typer.Context) -> Any:
        as_json = ctx.meta.get("skyrack.json", False)
        try:
            return super().invoke(ctx)
        except InputError as exc:
            raise fail(exc.problems, as_json) from None
        except UsageError as exc:
            if not as_json:
                raise
            dump_json(failure(error=exc.format_message()))  # type: ignore[attr-defined]
            raise typer.Exit(EXIT_USAGE) from None


app = typer.Typer(
    name="skyrack",
    cls=Group,
    help="Provision hybrid Kubernetes clusters: Azure control plane, on-prem GPU racks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        out.print(f"skyrack {safe(package_version())}")
        raise typer.Exit()


@app.callback()
def root(
    _version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                           help="Print skyrack's version and exit.")] = False,
) -> None:
    """Provision hybrid Kubernetes clusters: Azure control plane, on-prem GPU racks."""


@app.command()
def validate(paths: EnvsArg = None, as_json: JsonOpt = False) -> None:
    """Check environment files; list every problem as `file: field: what is wrong`."""
    files = env_files(paths or [DEFAULT_ENV])
    problems: list[Problem] = []
    valid = []
    for path in files:
        try:
            env = config.load(path)
            valid.append({"file": str(path), "name": env.name, "nodes": len(env.rack_nodes)})
        except InputError as exc:
            problems.extend(exc.problems)
    if as_json:
        dump_json(failure(problems, valid=valid) if problems else ok(valid=valid, problems=[]))
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
        dump_json(ok(data))
        return
    print_plan(p, wrote)


def print_plan(p: planmod.Plan, wrote: bool) -> None:
    env, sz = p.env, p.sizing
    out.print(f"[bold]{safe(env.name)}[/bold] ({safe(p.source)}): {len(p.nodes)} on-prem nodes in {len(env.racks)} "
              f"racks, {env.cloud_max_nodes} cloud pool nodes at most; Kubernetes {safe(env.kubernetes.version)}")
    out.print(f"API servers: {env.control_plane.apiservers.count} x {safe(sz.apiserver_vm_size)} "
              f"(model: {sz.apiserver_heap_gib} GiB heap, {sz.apiserver_memory_gib} GiB and {sz.apiserver_cores} vCPUs "
              f"needed for {sz.nodes} nodes)")
    t = p.tuning
    out.print(f"Load settings for {t.nodes} nodes: API server inflight {t.max_requests_inflight} reads / "
              f"{t.max_mutating_requests_inflight} mutations, goaway-chance {t.goaway_chance}, shutdown delay "
              f"{t.shutdown_delay_s} s, audit log <= {t.audit_log_bound_mib} MiB; controller manager "
              f"{t.controller_manager_qps}/{t.controller_manager_burst} QPS/burst, scheduler "
              f"{t.scheduler_qps}/{t.scheduler_burst}")
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
    table("Racks", ("rack", "team", "gpus", "nodes", "first node", "pod ranges", "kubelet keeps"),
          ((name, nodes[0].team or "-", f"{nodes[0].gpu_count} x {nodes[0].gpu_model}" if nodes[0].gpu_model else "-",
            len(nodes), f"{nodes[0].name} {nodes[0].ip}", f"{nodes[0].pod_cidr} ..",
            nodes[0].reservation.short() if nodes[0].reservation else "- (no hardware)")
           for name, nodes in racks.items()))
    pod_ips = sum(2 ** (32 - int(n.pod_cidr.split("/")[1])) for n in p.nodes)
    out.print(f"Pod addresses allocated on-prem: {pod_ips:,} (capacity {len(p.nodes) * p.max_pods:,} pods)")
    a = p.allocation
    if not a.changed:
        out.print(f"Lock {safe(p.lock_path)}: up to date")
    else:
        verb = "written" if wrote else "would change"
        out.print(f"Lock {safe(p.lock_path)}: {verb}: +{len(a.added)} allocated, {len(a.released)} leaving, "
                  f"{len(a.moved)} moved" + (f" ({safe(a.reason)})" if a.reason else ""))
    if a.leaving:
        out.print(f"Leaving: {safe(', '.join(a.leaving))}: their pod ranges stay reserved until `skyrack join` "
                  "has drained, reset and deleted them")


def table(title: str, columns: tuple[str, ...], rows: Any) -> None:
    """Print a table; every cell goes through `safe`."""
    t = Table(*columns, title=safe(title), title_justify="left")
    for row in rows:
        t.add_row(*(safe(c) for c in row))
    out.print(t)


class ClusterUnread(Exception):
    """The cluster named by --outputs did not answer (the message says what it said)."""


@app.command()
def upgrade(
    path: EnvArg = DEFAULT_ENV,
    show_plan: Annotated[bool, typer.Option("--plan", help="Print the ordered steps; change nothing (required: "
                                                         "each step is run by the command it names).")] = False,
    outputs: Annotated[Path | None, typer.Option(help="Control-plane outputs with admin_kubeconfig (`pulumi stack "
                                                      "output --json --show-secrets`): read the cluster's versions, "
                                                      "list only the nodes behind.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The steps of an upgrade to the file's kubernetes.version: control plane, cluster layer, racks in batches."""
    from . import upgrades
    from .join import departures, driver
    from .join import upgrade as racks
    from .kube.health import ApiError

    p = guarded(lambda: planmod.make(path), as_json)
    if not show_plan:
        raise fail([Problem("--plan", "", "skyrack upgrade only plans: give --plan (the racks' step is run by "
                                          "`skyrack join`, which upgrades the nodes behind)")], as_json)
    nodes = api_version = None
    if outputs is not None:
        data = guarded(lambda: contract.validate(contract.read_file(outputs), outputs,
                                                 ("apiserver_endpoint", "admin_kubeconfig")), as_json)

        def read() -> tuple[list, Any]:
            try:
                with driver.cluster(data) as call:
                    return departures.env_nodes(call, p.env.name), racks.control_plane(call)
            except ApiError as exc:
                raise ClusterUnread(f"the cluster did not answer ({exc}): nothing was planned") from None

        nodes, api_version = guarded(read, as_json, (ClusterUnread,))
    steps = upgrades.steps(p, nodes, api_version)
    if as_json:
        dump_json(ok(steps.to_dict()))
        return
    for line in upgrades.lines(steps, str(path)):
        out.print(safe(line), highlight=False)


@app.command("inventory")
def inventory_cmd(
    path: EnvArg = DEFAULT_ENV,
    as_json: Annotated[bool, typer.Option("--json", help="Ansible dynamic-inventory JSON (`--list` format).")] = False,
    outputs: Annotated[Path | None, typer.Option(help="Control-plane outputs (JSON, `pulumi stack output --json`).")] = None,
) -> None:
    """Print the Ansible inventory of the on-prem racks (YAML, or dynamic-inventory JSON).

    Secret outputs never enter it (`skyrack join` hands the ones it needs to Ansible itself)."""
    p = guarded(lambda: planmod.make(path), as_json)
    outs = None
    if outputs:
        public, secret = contract.split_secrets(guarded(lambda: contract.validate(contract.read_file(outputs), outputs),
                                                        as_json))
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
        message = f"internal error {type(exc).__name__}: {str(exc)[:500]}"
        err.print(f"[red]internal error[/red] {safe(type(exc).__name__)}: {safe(str(exc)[:500])} (a bug in skyrack, "
                  "not a verdict on the input; SKYRACK_DEBUG=1 shows the traceback)")
        if wants_json(sys.argv[1:]):
            dump_json(failure(error=message))
        sys.exit(EXIT_INTERNAL)


# The edges' commands, each from its own module (which imports only skyrack.cliutil of the command line).
register_gitops(app)  # `skyrack diff`, `skyrack check`
app.add_typer(lab_app, name="lab")
app.command("join")(join)
app.add_typer(etcd_app, name="etcd")
app.add_typer(kube_app, name="kube")
app.add_typer(job_app, name="job")

if __name__ == "__main__":
    main()
