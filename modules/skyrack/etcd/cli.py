"""`skyrack etcd ...`: the control plane's etcd clusters, from the operator's seat (see docs/etcd.md)."""

from __future__ import annotations

from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from azure.core.exceptions import AzureError
from rich.table import Table

from .. import plan as planmod
from ..cliutil import DEFAULT_ENV, EnvArg, JsonOpt, dump_json, err, failure, guarded, ok, out
from ..errors import EXIT_USAGE, InputError, Problem
from ..lab import controlplane, lifecycle
from ..lab.state import Paths
from ..term import safe
from . import ops
from .client import EtcdError, Tls
from .remote import RemoteError, Ssh

app = typer.Typer(help="etcd of an environment: status, snapshots to Blob Storage, restore, member replacement.",
                  no_args_is_help=True)

# The etcd clusters an environment may have: the plan's etcd roles (`--cluster` accepts nothing else).
Cluster = StrEnum("Cluster", [(role, role) for role in planmod.ROLES if role.startswith("etcd")])
ETCD_ROLES = frozenset(c.value for c in Cluster)
ClusterOpt = Annotated[Cluster, typer.Option("--cluster", help="etcd (the main cluster) or etcd-events.")]
PkiOpt = Annotated[Path | None, typer.Option(help="Directory with ca.crt, client.crt, client.key of an etcd client "
                                                  "certificate (a lab environment has its own).")]
SshOpt = Annotated[Path | None, typer.Option(help="ssh_config naming every member (a lab environment has its own).")]
BlobOpt = Annotated[str | None, typer.Option(
    envvar="AZURE_STORAGE_CONNECTION_STRING",
    help="Blob Storage connection string (a lab environment uses its Azurite).")]


def _run(fn, as_json: bool = False):
    return guarded(fn, as_json, (EtcdError, RemoteError, AzureError, ValueError, RuntimeError))


def target(path: Path, pki_dir: Path | None, ssh_config: Path | None, blob: str | None) -> ops.Target:
    plan = planmod.make(path)
    ssh = Ssh(ssh_config) if ssh_config else None
    if plan.env.lab is not None and pki_dir is None:
        paths = Paths.for_bridge(plan.env.lab.bridge)
        if not (controlplane.home(paths) / "pki.json").exists():
            raise InputError([Problem(str(path), "lab", "this lab's control plane is not up: run "
                                                        f"`skyrack etcd lab-up {path}` first")])
        pki_dir = controlplane.client_tls_dir(plan, paths)
        ssh = ssh or Ssh(paths.ssh_config)
    if pki_dir is None:
        raise InputError([Problem(str(path), "", "give --pki-dir: a directory with ca.crt, client.crt and client.key "
                                                 "of a client certificate signed by the environment's etcd CA")])
    return ops.Target(plan, Tls.from_dir(pki_dir), ssh, blob)


def usage(message: str, as_json: bool = False) -> NoReturn:
    if as_json:
        dump_json(failure(error=message))
    else:
        err.print(safe(message))
    raise typer.Exit(EXIT_USAGE)


def _say(as_json: bool):
    return (lambda _m: None) if as_json else (lambda m: err.print(f"[bold]etcd[/bold] {safe(m)}"))


@app.command()
def seed(path: EnvArg = DEFAULT_ENV,
         out_dir: Annotated[Path | None, typer.Option("--out", help="Where to write <host>.yaml.")] = None) -> None:
    """Render the control-plane members' user-data for `skyrack lab up --seed-dir` (lab environments)."""
    lab = _run(lambda: lifecycle.open_lab(path))
    d = controlplane.write_seeds(lab.plan, lab.paths, out_dir)
    out.print(safe(d))


@app.command("lab-up")
def lab_up(path: EnvArg = DEFAULT_ENV, as_json: JsonOpt = False) -> None:
    """`lab up` of the etcd members only, each booted from its user-data (API servers and racks: `skyrack lab up`)."""
    say = _say(as_json)

    def go():  # exactly `skyrack etcd seed` + `skyrack lab up --seed-dir`
        lab = lifecycle.open_lab(path)
        seeds = controlplane.read_seeds(controlplane.write_seeds(lab.plan, lab.paths))
        lifecycle.up(path, seeds, say=say, timeout=300, roles=ETCD_ROLES)
        # cloud-init only starts the members (a member is ready once a quorum of its peers is): wait
        # for every one to answer healthy, as an operator would with `skyrack etcd status`.
        t = target(path, None, None, None)
        ops.wait_healthy(t, [m for m in t.plan.members if m.role != "apiserver"], timeout=600)
        return seeds

    seeds = _run(go, as_json)
    show(path, None, None, as_json, seeded=sorted(seeds))


@app.command()
def status(path: EnvArg = DEFAULT_ENV,
           cluster: Annotated[Cluster | None, typer.Option("--cluster", help="Only this cluster.")] = None,
           pki_dir: PkiOpt = None, as_json: JsonOpt = False) -> None:
    """Health, leader, raft term/index, revision, size against the quota and alarms of every member, over mutual TLS."""
    show(path, cluster, pki_dir, as_json)


def show(path: Path, cluster: Cluster | None, pki_dir: Path | None, as_json: bool, seeded: list[str] | None = None) -> None:
    t = _run(lambda: target(path, pki_dir, None, None), as_json)
    clusters = [cluster.value] if cluster else [c.value for c in Cluster if t.plan.members_of(c.value)]
    rows = _run(lambda: ops.status(t, clusters), as_json)
    ok = all(r.healthy for r in rows) and not any(r.alarms for r in rows)  # an alarm: the cluster needs a hand
    if as_json:
        dump_json({"ok": ok, "members": [asdict(r) for r in rows], **({"seeded": seeded} if seeded else {})})
    else:
        table = Table("cluster", "member", "endpoint", "healthy", "leader", "term", "index", "revision", "db (in use)",
                      "of quota", "alarms", "error", title=f"etcd of {safe(t.plan.env.name)}", title_justify="left")
        for r in rows:
            share = f"{100 * r.db_size / r.quota:.0f} %" if r.quota else "-"
            table.add_row(safe(r.cluster), safe(r.name), safe(r.endpoint), "yes" if r.healthy else "[red]no[/red]",
                          "*" if r.leader else "", str(r.raft_term), str(r.raft_index), str(r.revision),
                          f"{r.db_size // 1024} KiB ({r.db_size_in_use // 1024})", share,
                          f"[red]{safe(' '.join(r.alarms))}[/red]" if r.alarms else "", safe(r.error[:60]))
        out.print(table)
        out.print(f"{sum(r.healthy for r in rows)}/{len(rows)} members healthy")
        for r in rows:
            if "NOSPACE" in r.alarms:
                out.print(f"[red]{safe(r.name)}: NOSPACE: the cluster takes no writes[/red]; compact, then "
                          f"`skyrack etcd defrag {safe(path)} --cluster {safe(r.cluster)}` (it disarms the alarm once "
                          "every member is under its quota) or raise control_plane.etcd.quota_backend_gib")
                break
    if not ok:
        raise typer.Exit(1)


@app.command()
def defrag(path: EnvArg = DEFAULT_ENV, cluster: ClusterOpt = Cluster.etcd, pki_dir: PkiOpt = None,
           as_json: JsonOpt = False) -> None:
    """Defragment every member, one at a time, the leader last (after handing its leadership over); refuses
    while a member is unhealthy. The members' own timer does this daily (docs/etcd.md)."""
    t = _run(lambda: target(path, pki_dir, None, None), as_json)
    done = _run(lambda: ops.defragment(t, cluster, say=_say(as_json)), as_json)
    if as_json:
        dump_json(ok(members=[asdict(d) for d in done]))
    else:
        freed = sum(d.before - d.after for d in done)
        out.print(f"{safe(cluster)}: {len(done)} members defragmented, {freed:,} bytes returned to the disk")


@app.command()
def snapshot(path: EnvArg = DEFAULT_ENV, cluster: ClusterOpt = Cluster.etcd, pki_dir: PkiOpt = None,
             blob_connection_string: BlobOpt = None, as_json: JsonOpt = False) -> None:
    """Stream a snapshot from a healthy member into the environment's backup container."""
    t = _run(lambda: target(path, pki_dir, None, blob_connection_string), as_json)
    snap = _run(lambda: ops.snapshot(t, cluster, say=_say(as_json)), as_json)
    if as_json:
        dump_json(ok(asdict(snap)))
    else:
        out.print(f"snapshot {safe(snap.name)}: {snap.size} bytes, revision {snap.revision}, sha256 {safe(snap.sha256[:16])}…")


@app.command()
def snapshots(path: EnvArg = DEFAULT_ENV, cluster: ClusterOpt = Cluster.etcd, pki_dir: PkiOpt = None,
              blob_connection_string: BlobOpt = None, as_json: JsonOpt = False) -> None:
    """List the snapshots of a cluster in the backup container, oldest first."""
    t = _run(lambda: target(path, pki_dir, None, blob_connection_string), as_json)
    snaps = _run(lambda: ops.snapshots(t, cluster), as_json)
    if as_json:
        dump_json(ok(snapshots=[asdict(s) for s in snaps]))
        return
    for s in snaps:
        out.print(f"{safe(s.name)}  {s.size} bytes  revision {s.revision}")


@app.command()
def restore(path: EnvArg = DEFAULT_ENV,
            name: Annotated[str, typer.Option("--snapshot", help="Snapshot blob name (`skyrack etcd snapshots`), "
                                                                "or `latest`.")] = "latest",
            cluster: ClusterOpt = Cluster.etcd,
            yes: Annotated[bool, typer.Option("--yes", help="Confirm: every member's data is replaced.")] = False,
            pki_dir: PkiOpt = None, ssh_config: SshOpt = None, blob_connection_string: BlobOpt = None,
            as_json: JsonOpt = False) -> None:
    """Rebuild a cluster from a snapshot: every member stopped, restored and started as a new cluster."""
    if not yes:
        usage("restore replaces the data of every member of the cluster; run again with --yes", as_json)
    t = _run(lambda: target(path, pki_dir, ssh_config, blob_connection_string), as_json)
    rows = _run(lambda: ops.restore(t, cluster, name, say=_say(as_json)), as_json)
    if as_json:
        dump_json(ok(members=[asdict(r) for r in rows]))
    else:
        out.print(f"{safe(cluster)} restored: cluster {rows[0].cluster_id}, revision {rows[0].revision}")


@app.command("replace-member")
def replace_member(path: EnvArg = DEFAULT_ENV,
                   member: Annotated[str, typer.Option("--member", help="The member to replace, e.g. etcd-2.")] = "",
                   cluster: ClusterOpt = Cluster.etcd, pki_dir: PkiOpt = None,
                   ssh_config: SshOpt = None, as_json: JsonOpt = False) -> None:
    """Replace a member whose data directory is lost: remove, add and rejoin it empty; it syncs from the leader."""
    if not member:
        usage("say which member to replace: --member NAME (e.g. --member etcd-2)", as_json)
    t = _run(lambda: target(path, pki_dir, ssh_config, None), as_json)
    st = _run(lambda: ops.replace_member(t, cluster, member, say=_say(as_json)), as_json)
    if as_json:
        dump_json(ok(asdict(st)))
    else:
        out.print(f"{safe(member)} rejoined {safe(cluster)} as member {st.member_id}, healthy: {st.healthy}")
