"""`skyrack lab up|status|down|stop`: the local lab's command line (see docs/lab.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import build
from ..build import conformance as suite_build
from ..build import kubernetes as k8s_build
from ..cliutil import CONFIGS, DEFAULT_ENV, EnvArg, JsonOpt, dump_json, env_path, err, guarded, ok, out
from ..engine import EngineError
from ..kube import health
from ..term import safe
from . import cluster, controlplane, lifecycle, stacks

app = typer.Typer(help="The local lab: every host of a lab environment as a systemd-nspawn node.",
                  no_args_is_help=True)


def _run(fn, as_json: bool = False):
    return guarded(fn, as_json, (lifecycle.LabError, build.BuildError, cluster.ClusterError, EngineError))


@app.command()
def up(
    path: EnvArg = DEFAULT_ENV,
    seed_dir: Annotated[Path | None, typer.Option(help="Directory of <host>.yaml cloud-init user-data "
                                                       "(NoCloud seed, read at a node's first boot).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Start every host of the environment (idempotent; recovers after a crash)."""
    say = (lambda _m: None) if as_json else (lambda m: err.print(f"[bold]lab[/bold] {m}"))
    _run(lambda: lifecycle.up(path, controlplane.read_seeds(seed_dir), say=say), as_json)
    show(path, as_json, done=True)


@app.command()
def replace(
    member: Annotated[str, typer.Argument(help="The API server to replace (e.g. apiserver-0).")],
    path: EnvArg = DEFAULT_ENV,
    as_json: JsonOpt = False,
) -> None:
    """Replace one API server as Azure's `pulumi up --replace` does: a new disk, the current user-data; returns when
    it answers /readyz (one member at a time: an upgrade's control-plane step)."""
    say = (lambda _m: None) if as_json else (lambda m: err.print(f"[bold]lab[/bold] {m}"))
    _run(lambda: lifecycle.replace(path, member, say=say), as_json)
    if as_json:
        dump_json({"ok": True, "replaced": member})


@app.command()
def status(path: EnvArg = DEFAULT_ENV, as_json: JsonOpt = False) -> None:
    """Show the lab's hosts (running, SSH answering), bridge, rules and apt proxy."""
    if not running(show(path, as_json)):
        raise typer.Exit(1)


def running(st: dict) -> bool:
    return bool(st["up"]) and all(h["running"] for h in st["hosts"]) and (not st["mesh"] or bool(st["receptor"]))


def show(path: Path, as_json: bool, done: bool = False) -> dict:
    """Print the lab's status; `ok` in JSON: the command did its work (`up`), or every host runs (`status`)."""
    st = _run(lambda: lifecycle.status(path), as_json)
    if as_json:
        dump_json({**st, "ok": done or running(st)})
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
    ino = st["inotify"]
    if ino["limit"]:
        out.print(f"inotify instances held by root (every lab's nodes share them): {ino['in_use']} of {ino['limit']}")
    out.print(f"ssh: ssh -F {st['ssh_config']} <host>")
    if st["mesh"]:
        out.print(f"Receptor (join --via receptor): {st['receptor'] or '[red]not running[/red]'}")
    if st["kubernetes"]:
        out.print(f"Kubernetes {st['kubernetes']}: registry {st['registry'] or 'not running'}; API servers' "
                  f"load balancer {st['load_balancer'] or '[red]not running[/red]'}; "
                  f"kubectl --kubeconfig $(skyrack lab kubeconfig) get nodes")
    return st


@app.command()
def down(
    path: EnvArg = DEFAULT_ENV,
    bridge: Annotated[str | None, typer.Option(help="Take down the lab recorded on this bridge instead, from its "
                                                    "state alone (for a lab whose environment file is gone; "
                                                    "`skyrack lab list` shows them).")] = None,
) -> None:
    """Remove everything `up` made: nodes, their disks, the proxy, rules, bridge, state."""
    say = lambda m: err.print(f"[bold]lab[/bold] {m}")  # noqa: E731
    if bridge is not None:
        _run(lambda: lifecycle.down_bridge(bridge, say=say))
        out.print(f"lab on {safe(bridge)} down")
        return
    _run(lambda: lifecycle.down(path, say=say))
    out.print("lab down")


@app.command("list")
def list_cmd(as_json: JsonOpt = False) -> None:
    """Every lab on this machine, whichever environment made it: bridge, environment file, nodes running.
    All labs share root's inotify instances (docs/lab.md), so a forgotten one can starve the next."""
    found = lifecycle.labs()
    if as_json:
        dump_json(ok(labs=found))
        return
    if not found:
        out.print("no lab on this machine")
        return
    t = Table("bridge", "environment", "environment file", "nodes running", title="labs on this machine",
              title_justify="left")
    for lab in found:
        src = safe(lab["source"] or "?") + ("" if lab["source_exists"] else " [red](gone)[/red]")
        t.add_row(safe(lab["bridge"]), safe(lab["environment"] or "?"), src, f"{lab['running']} of {lab['nodes']}")
    out.print(t)
    out.print("take one down: skyrack lab down ENV, or skyrack lab down --bridge BRIDGE when its file is gone")


@app.command()
def stop(host: Annotated[str, typer.Argument(help="Host to power off (`up` boots it again).")],
         path: EnvArg = DEFAULT_ENV) -> None:
    """Power one host off, keeping its disk (to test failures)."""
    _run(lambda: lifecycle.stop_host(path, host))
    out.print(f"{host} stopped")


def _build_say(m: str) -> None:
    err.print(f"[bold]build[/bold] {m}")


@app.command("build")
def build_cmd(
    path: EnvArg = DEFAULT_ENV,
    with_conformance: Annotated[bool, typer.Option(
        "--conformance", help="Also build Kubernetes' conformance suite (e2e.test, ginkgo) and the images its "
                              "representative subset runs (the lab's conformance test); bench/conformance.py builds "
                              "the whole suite's other images when it first runs the whole suite.")] = False,
    site: Annotated[bool, typer.Option(
        "--site", help="Only what `lab up` needs: Kubernetes (binaries, apt repository, images) and the Pulumi "
                       "engine without its Kubernetes provider, which the cluster layer's `lab pulumi` needs, "
                       "nor KWOK, which `lab fleet up` needs "
                       "(./dev test runs the tests that need no more while the rest builds).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build (once, cached) what the lab needs: Kubernetes (binaries, apt repository, images), the Pulumi
    engine and KWOK (the simulated fleet's); list the cache."""
    if site and with_conformance:
        err.print("[red]error[/red] --site builds only what `lab up` needs and --conformance more: choose one")
        raise typer.Exit(2)
    lab = _run(lambda: lifecycle.open_lab(path), as_json)
    if lab.kubernetes is not None:
        b = lab.kubernetes
        arts = _run(lambda: build.ensure(b, lab.cfg.suite, say=_build_say, kubernetes_provider=not site), as_json)
        if not site:
            _run(lambda: k8s_build.kwok(b, _build_say), as_json)  # the simulated fleet's (`lab fleet up`)
        if with_conformance:
            _run(lambda: suite_build.suite_images(b, arts.binaries, lab.cfg.suite, suite_build.suite(b, _build_say), _build_say),
                 as_json)
    entries = build.report()
    if as_json:
        dump_json(ok(kubernetes=lab.plan.env.kubernetes.version if lab.kubernetes else None, cache=entries))
        return
    t = Table("component", "version", "size", "built in", "path", title="build cache", title_justify="left")
    for e in entries:
        t.add_row(e["component"], e["version"], f"{e['mib']} MiB", e["built_in"], e["path"])
    out.print(t)


@app.command()
def kubeconfig(path: EnvArg = DEFAULT_ENV) -> None:
    """Print the path of the lab cluster's admin kubeconfig (root-only)."""
    _print_path(path, cluster.kubeconfig_path, "admin kubeconfig")


@app.command()
def outputs(path: EnvArg = DEFAULT_ENV) -> None:
    """Print the path of the lab's control-plane outputs (the file `skyrack join --outputs` reads)."""
    _print_path(path, cluster.outputs_path, "outputs file")


def _print_path(path: Path, which, what: str) -> None:
    lab = _run(lambda: lifecycle.open_lab(path))
    p = which(lab.paths)
    if not p.exists():
        err.print(f"[red]error[/red] {path}: the lab has no {what} yet: run `skyrack lab up {path}` "
                  "(it needs `mirrors.kubernetes`)")
        raise typer.Exit(1)
    print(p)


@app.command()
def nodes(
    path: EnvArg = DEFAULT_ENV,
    wait: Annotated[float, typer.Option(help="Seconds to wait for every planned worker to be Ready (0: do not wait).")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """The lab cluster's nodes: Ready, team and rack labels, taints (exit 1 if a planned worker is not Ready)."""
    lab = _run(lambda: lifecycle.open_lab(path), as_json)
    artifacts = _run(lambda: lifecycle.artifacts(lab), as_json)
    if wait:
        _run(lambda: cluster.wait_nodes(lab.plan, lab.paths, artifacts, wait), as_json)
    st = _run(lambda: cluster.node_status(lab.plan, lab.paths, artifacts), as_json)
    planned = {n.name for n in lab.plan.nodes}
    ok = planned <= {n["name"] for n in st if n["ready"]}
    if as_json:
        dump_json({"ok": ok, "nodes": st})
    else:
        t = Table("node", "ready", "version", "runtime", "labels", "taints",
                  title=f"{lab.plan.env.name}: Kubernetes nodes", title_justify="left")
        for n in st:
            t.add_row(n["name"], "yes" if n["ready"] else "[red]no[/red]", n["version"] or "", n["runtime"] or "",
                      ", ".join(f"{k}={v}" for k, v in n["labels"].items()), ", ".join(n["taints"]))
        out.print(t)
    if not ok:
        raise typer.Exit(1)


@app.command()
def ready(
    path: EnvArg = DEFAULT_ENV,
    wait: Annotated[float, typer.Option(help="Seconds to wait until every check passes (0: check once).")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Is the lab cluster ready for work? The API server, controller manager and scheduler leading, every
    planned node Ready, kube-proxy on each, CoreDNS serving and answering from each node (exit 1 if not)."""
    lab = _run(lambda: lifecycle.open_lab(path), as_json)
    _run(lambda: lifecycle.artifacts(lab), as_json)  # a lab without Kubernetes: one clear error
    say = (lambda _m: None) if as_json else (lambda m: err.print(f"[bold]lab[/bold] {safe(m)}"))
    try:
        found = _run(lambda: cluster.wait_ready(lab.plan, lab.paths, wait, say=say), as_json)
    except health.NotReady as exc:
        found = exc.checks
    is_ready = all(c.ready for c in found)
    if as_json:
        dump_json({"ok": is_ready, "checks": [c.as_dict() for c in found]})
    else:
        t = Table("check", "ready", "detail", title=f"{lab.plan.env.name}: cluster readiness", title_justify="left")
        for c in found:
            t.add_row(c.name, "yes" if c.ready else "[red]no[/red]", safe(c.detail))
        out.print(t)
        if not is_ready:
            err.print(f"[red]error[/red] not ready{f' after {wait:.0f} s' if wait else ''}: "
                      f"{safe(health.summary(found))}")
    if not is_ready:
        raise typer.Exit(1)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def kubectl(ctx: typer.Context, path: Annotated[Path, typer.Option("--env", help="The lab's environment (a name "
                                                   "or its .yaml file).", parser=env_path)] = DEFAULT_ENV) -> None:
    """Run the lab's own kubectl with its admin kubeconfig: `skyrack lab kubectl [--env FILE] get nodes`."""
    lab = _run(lambda: lifecycle.open_lab(path))
    artifacts = _run(lambda: lifecycle.artifacts(lab))
    binary = str(artifacts.binaries.path("kubectl"))
    args = [binary, f"--kubeconfig={cluster.kubeconfig_path(lab.paths)}", *passthrough_args(sys.argv, ctx.args)]
    os.execv(binary, args)  # noqa: S606 - no shell, the arguments as typed


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def pulumi(ctx: typer.Context, path: Annotated[Path, typer.Option("--env", help="The lab's environment (a name "
                                                  "or its .yaml file).", parser=env_path)] = DEFAULT_ENV) -> None:
    """Run the built Pulumi on the lab's cluster-layer stack: `skyrack lab pulumi [--env FILE] up|preview|destroy`.

    stacks/cluster, stack <env>, the lab's own backend and passphrase (see `skyrack lab env`)."""
    lab = _run(lambda: lifecycle.open_lab(path))
    _run(lambda: stacks.require_up(lab.paths, path))  # before the engine: a lab never brought up builds nothing
    artifacts = _run(lambda: lifecycle.artifacts(lab, kubernetes_provider=True, say=_build_say))
    args = passthrough_args(sys.argv, ctx.args, "pulumi")
    ws = stacks.workspace(lab.paths, artifacts.engine)
    streamed = "--json" not in args  # Pulumi's JSON document alone on stdout; else its output as it comes
    result = _run(lambda: stacks.cluster(ws, lab.paths, path, lab.plan.env.name, args,
                                         say=print if streamed else None))
    if not streamed:
        sys.stdout.write(result)


@app.command("env")
def env_cmd(path: EnvArg = DEFAULT_ENV) -> None:
    """Print shell exports for the lab's Pulumi (`eval "$(skyrack lab env)"`, then `pulumi` as usual)."""
    lab = _run(lambda: lifecycle.open_lab(path))
    artifacts = _run(lambda: lifecycle.artifacts(lab, kubernetes_provider=True, say=_build_say))
    print(stacks.workspace(lab.paths, artifacts.engine).exports(), end="")


def passthrough_args(argv: list[str], parsed: list[str], command: str = "kubectl") -> list[str]:
    """The wrapped tool's own arguments exactly as typed: click drops a `--`, which `kubectl exec POD -- CMD`
    needs."""
    if command not in argv:
        return list(parsed)
    args = argv[argv.index(command) + 1:]
    for i, a in enumerate(args):
        if a == "--env" and i + 1 < len(args):
            return args[:i] + args[i + 2:]
        if a.startswith("--env="):
            return args[:i] + args[i + 1:]
    return args


fleet_app = typer.Typer(help="A simulated fleet (KWOK) on the lab's real control plane: an environment's planned "
                             "nodes, registered as the join would, holding leases and reporting status like kubelets.",
                        no_args_is_help=True)
app.add_typer(fleet_app, name="fleet")


@fleet_app.command("up")
def fleet_up(
    path: EnvArg = DEFAULT_ENV,
    shape: Annotated[Path, typer.Option("--shape", help="The environment whose planned nodes are simulated "
                                                        "(names, labels, taints, sizes, GPUs).",
                                        parser=env_path)] = CONFIGS / "prod.yaml",
    count: Annotated[int, typer.Option("--nodes", help="How many, in the plan's rack order.")] = 200,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for every node to be Ready.")] = 1800,
    min_ready: Annotated[float, typer.Option(
        "--min-ready", min=0.01, max=1.0,
        help="At the timeout, go on if at least this fraction of the nodes is Ready (a machine too small to keep "
             "the whole fleet Ready: the result says how many were); below it, an error.")] = 1.0,
    as_json: JsonOpt = False,
) -> None:
    """Register the first N planned nodes of --shape as KWOK nodes and wait until each is Ready (idempotent)."""
    from . import fleet

    say = (lambda _m: None) if as_json else (lambda m: err.print(f"[bold]fleet[/bold] {safe(m)}"))
    res = _run(lambda: fleet.up(path, shape, count, timeout, say, min_ready=min_ready), as_json)
    if as_json:
        dump_json(ok(**res))
    else:
        ready = (f"all Ready after {res['ready_seconds']} s" if res["all_ready"]
                 else f"{res['ready']} Ready after {res['ready_seconds']} s")
        out.print(f"{res['nodes']} simulated nodes of {res['shape']} on lab {res['environment']} "
                  f"({res['created']} created in {res['create_seconds']} s, {ready}); "
                  f"remove them: skyrack lab fleet down {path}")


@fleet_app.command("down")
def fleet_down(path: EnvArg = DEFAULT_ENV, as_json: JsonOpt = False) -> None:
    """Delete every simulated node (their pods go with them) and stop KWOK."""
    from . import fleet

    say = (lambda _m: None) if as_json else (lambda m: err.print(f"[bold]fleet[/bold] {safe(m)}"))
    res = _run(lambda: fleet.down(path, say=say), as_json)
    if as_json:
        dump_json(ok(**res))
    else:
        out.print(f"{res['deleted']} simulated nodes deleted from lab {res['environment']}")
