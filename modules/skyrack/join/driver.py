"""Run the join playbook rack by rack with ansible-runner, and collect what happened per host.

Each rack is one ansible-runner run in its own record directory (records.py). The
inventory comes from the plan (skyrack.inventory) plus the control plane's outputs;
secret outputs never enter the inventory or the record (ansible-runner writes the whole
environment into it): they are extra variables in a 0600 file on a memory filesystem,
removed when the run ends. A lab
environment adds the lab's SSH config, so host keys are checked against what `lab up`
generated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner
import yaml
from rich.console import Console

from .. import files, inventory
from .. import outputs as contract
from .. import plan as planmod
from ..errors import InputError, Problem
from ..kube import drain as drainmod
from ..kube import readiness
from ..kube.health import ApiError
from ..term import safe
from . import departures, fleet, node_objects, receptor, records, upgrade
from . import outputs as outmod
from .node_files import ANSIBLE_DIR, TEMPLATES
from .progress import Board, Progress, message
from .records import HostResult, RackRun

PLAYBOOK = "join.yml"
REPORT_TASK = "Skyrack report"
SETTINGS = ("project", "defaults")


@dataclass
class JoinOptions:
    rack: str | None = None
    limit: list[str] | None = None
    check: bool = False
    outputs: Path | None = None
    retry_failed: bool = False
    runs_dir: Path = Path("runs")
    tags: list[str] | None = None  # only the roles with these tags (role_tags())
    keep_runs: int = 20  # run records kept per rack, the oldest removed first
    settings: str = "project"  # "defaults": Ansible's own defaults (for the benchmark)
    extravars: dict[str, Any] = field(default_factory=dict)
    via: str = "local"  # "receptor": each rack's run on its execution node (receptor.py)
    # None: what the environment file's `join:` section says (its defaults: 1, True, 200)
    parallel: int | None = None  # racks at once after the canary rack (fleet.py)
    canary: bool | None = None  # the first rack alone first
    joins_per_minute: int | None = None  # the control plane's bound (docs/join.md)


def role_tags() -> list[str]:
    """The join playbook's role tags, in its order (each role is tagged with its name)."""
    plays = yaml.safe_load((ANSIBLE_DIR / "playbooks" / PLAYBOOK).read_text())
    return [t for play in plays for role in play.get("roles", []) for t in role.get("tags", [])]


def check_tags(tags: list[str] | None) -> None:
    unknown = [t for t in tags or [] if t not in role_tags()]
    if unknown:
        raise InputError([Problem("--tags", "", f"no role is tagged {', '.join(map(repr, unknown))} "
                                                f"(the roles' tags: {', '.join(role_tags())})")])


def select(p: planmod.Plan, opts: JoinOptions) -> list[tuple[str, list[str]]]:
    """The racks to run, in file order, each with its hosts; InputError for unknown names."""
    src = str(p.source)
    racks: dict[str, list[str]] = {}
    for n in p.nodes:
        racks.setdefault(n.rack, []).append(n.name)
    if opts.rack is not None and opts.rack not in racks:
        raise InputError([Problem(src, "racks", f"no rack named {opts.rack!r} (racks: {', '.join(racks) or 'none'})")])
    chosen = {r: h for r, h in racks.items() if opts.rack in (None, r)}
    if opts.limit:
        known = {h for hosts in chosen.values() for h in hosts}
        unknown = [h for h in opts.limit if h not in known]
        if unknown:
            where = f"rack {opts.rack}" if opts.rack else p.env.name
            raise InputError([Problem(src, "racks", f"--limit names hosts not in {where}: {', '.join(unknown)}")])
        chosen = {r: [h for h in hosts if h in opts.limit] for r, hosts in chosen.items()}
    if opts.retry_failed:
        retry: dict[str, list[str]] = {}
        for r, hosts in chosen.items():
            last = records.latest(opts.runs_dir, p.env.name, r)
            failed = set(last["failed_hosts"]) if last else set()
            retry[r] = [h for h in hosts if h in failed]
        chosen = retry
    return [(r, h) for r, h in chosen.items() if h]


def lab_vars(p: planmod.Plan) -> dict[str, Any]:
    """For a lab environment: reach nodes through the lab's SSH config (keys checked)."""
    if p.env.lab is None:
        return {}
    from ..lab.state import Paths

    cfg = Paths.for_bridge(p.env.lab.bridge).ssh_config
    if not cfg.exists():
        raise InputError([Problem(str(p.source), "lab", f"the lab is not up: run `skyrack lab up {p.source}` first")])
    return {"ansible_user": "root", "ansible_ssh_common_args": f"-F {cfg}"}


def write_inventory(run_dir: Path, p: planmod.Plan, public_outputs: dict[str, Any] | None,
                    inv: dict[str, Any] | None = None) -> Path:
    inv = inv or inventory.static(p, public_outputs)
    inv["all"]["vars"].update(lab_vars(p))
    path = run_dir / "inventory" / "hosts.yml"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    files.write_private(path, inventory.dump_yaml(inv))
    return path


def ansible_env(opts: JoinOptions, run_dir: Path, env_name: str) -> dict[str, str]:
    # ansible-playbook from the same environment as this Python, activated or not
    # ansible-runner turns host key checking off unless told otherwise: keys are always checked.
    path = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_HOST_KEY_CHECKING": "True"}
    if opts.settings == "project":
        return {**path, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
                "ANSIBLE_CACHE_PLUGIN_CONNECTION": str((opts.runs_dir / ".facts" / env_name).resolve())}
    cfg = run_dir / "ansible-defaults.cfg"  # only what the playbook needs to be found; the rest Ansible's defaults
    cfg.write_text(f"[defaults]\ncollections_path = {ANSIBLE_DIR / 'collections'}\n"
                   f"roles_path = {ANSIBLE_DIR / 'roles'}\n")
    return {**path, "ANSIBLE_CONFIG": str(cfg)}


def remote_env(env_name: str) -> dict[str, str]:
    """A run on an execution node: its own ansible-playbook (on the worker's PATH), the project's ansible.cfg
    (the working directory), a fact cache of its own."""
    return {"ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_CACHE_PLUGIN_CONNECTION": f"~/.cache/skyrack/facts/{env_name}"}


class Collector:
    """Per-host first error and skyrack report, from the run's events (and the closing stats)."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.errors: dict[str, str] = {}
        self.reports: dict[str, list[dict[str, str]]] = {}
        self.stats: dict[str, Any] = {}

    def __call__(self, ev: dict[str, Any]) -> bool:
        data = ev.get("event_data", {})
        host = data.get("host")
        kind = ev.get("event")
        if kind == "runner_on_ok" and data.get("task") == REPORT_TASK:
            msg = data.get("res", {}).get("msg")
            if isinstance(msg, list):
                self.reports[host] = msg
        elif kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            self.errors.setdefault(host, f"{data.get('task', '')}: {message(data.get('res', {}))}")
        elif kind == "playbook_on_stats":
            self.stats = {k: data.get(k) or {} for k in ("ok", "changed", "skipped", "failures", "dark", "processed")}
        return self.progress.event(ev)


@contextlib.contextmanager
def secret_vars(secrets: dict[str, Any]) -> Iterator[list[str]]:
    """`-e @file` arguments for the secrets, the file on a memory filesystem for the run only."""
    if not secrets:
        yield []
        return
    shm = Path("/dev/shm")  # noqa: S108 - TemporaryDirectory makes a private 0700 directory in it
    with tempfile.TemporaryDirectory(prefix="skyrack-", dir=shm if shm.is_dir() else None) as d:
        path = Path(d) / "secrets.yml"
        inventory.write_secret_vars(path, secrets)
        yield ["-e", f"@{path}"]


def run_rack(p: planmod.Plan, rack: str, hosts: list[str], opts: JoinOptions, public: dict[str, Any] | None,
             secrets: dict[str, Any], console: Console, board: Board | None = None,
             cancel: Callable[[], bool] | None = None, route: receptor.Route | None = None,
             playbook: str = PLAYBOOK, inv_data: dict[str, Any] | None = None, part_of: Path | None = None) -> RackRun:
    """One rack's run of a playbook (the join's, or with `inv_data` another inventory's: departures.py), here
    (ansible-runner) or, with a route, on its execution node through Receptor. With `part_of`, a part of a
    rack's run (an upgrade's batch, upgrade.py): its directory is made in that record, which gets the summary."""
    if part_of is None:
        run_dir = records.new_dir(opts.runs_dir, p.env.name, rack)
    else:
        run_dir = part_of / f"part-{sum(1 for _ in part_of.glob('part-*')) + 1}"
        run_dir.mkdir(mode=0o700)
    inv = write_inventory(run_dir, p, public, inv_data)
    started = time.time()
    result = RackRun(env=p.env.name, rack=rack, check=opts.check, record=str(run_dir), started=started,
                     tags=list(opts.tags or []), via=f"receptor:{route.node}" if route else "local",
                     playbook=playbook)
    lost = ""
    # a local run reads the secrets from a file in memory; a run on an execution node from one inside the
    # work payload (receptor.py: staged and kept in memory on both ends), never from the record
    with secret_vars(secrets if route is None else {}) as secret_args, Progress(console, rack, hosts, board) as progress, \
            records.private_files():
        collector = Collector(progress)
        # not "jsonfile": the fact cache is ansible.cfg's (kept across runs), not one per run
        common = {"limit": ",".join(hosts), "cmdline": " ".join([*secret_args, *(["--check"] if opts.check else [])])
                  or None, "ident": "ansible", "fact_cache_type": "ansible.cfg",
                  "tags": ",".join(opts.tags) if opts.tags else None}
        if route is None:
            r = ansible_runner.run(
                private_data_dir=str(run_dir), project_dir=str(ANSIBLE_DIR / "playbooks"), playbook=playbook,
                inventory=str(inv), envvars=ansible_env(opts, run_dir, p.env.name), event_handler=collector,
                quiet=True, cancel_callback=cancel,
                extravars={"skyrack_templates_dir": str(TEMPLATES), **opts.extravars}, **common)
            result.rc, result.status, stats = r.rc, r.status, r.stats or {}
        else:  # the project travels with the run; the worker finds ansible.cfg in it (its working directory)
            receptor.ship_project(run_dir)
            try:
                result.status, rc = receptor.run(route, run_dir, {
                    "playbook": f"playbooks/{playbook}", "envvars": remote_env(p.env.name),
                    "extravars": {"skyrack_templates_dir": "{{ playbook_dir }}/../templates", **opts.extravars},
                    **common}, collector, cancel, secrets)
                result.rc = rc if rc is not None else 1
            except (receptor.NodeLost, receptor.WorkFailed) as exc:  # the rack's failure, not the fleet's
                result.status, result.rc, lost = "failed", 1, str(exc)
            stats = collector.stats
    result.ended = time.time()
    result.seconds = round(result.ended - started, 1)
    for h in hosts:
        hr = HostResult(host=h, rack=rack, report=collector.reports.get(h, []))
        for name, key in (("ok", "ok"), ("changed", "changed"), ("skipped", "skipped"), ("failed", "failures"),
                          ("unreachable", "dark")):
            setattr(hr, name, int(stats.get(key, {}).get(h, 0)))
        if hr.unreachable:
            hr.result = "unreachable"
        elif hr.failed:
            hr.result = "failed"
        elif h in stats.get("processed", {}) and collector.reports.get(h) is not None:
            hr.result = "ok"
        hr.message = collector.errors.get(h, "")
        if hr.result == "not run":
            hr.message = hr.message or lost or (
                "the run stopped before this host finished (a batch failed: max_fail_percentage)" if stats
                else f"ansible-playbook failed before any host ran: {tail(run_dir)}")
        result.hosts.append(hr)
    if part_of is None:
        keep(result, opts, console)
    return result


def keep(result: RackRun, opts: JoinOptions, console: Console) -> None:
    """Save a rack run's summary and remove the rack's oldest records beyond --keep-runs."""
    records.save(result)
    try:
        records.prune(opts.runs_dir, result.env, result.rack, opts.keep_runs, Path(result.record))
    except OSError as exc:  # the run itself is recorded: an old record that stays is no failure of it
        console.print(f"[yellow]old run records of rack {safe(result.rack)} not removed: {safe(exc)}[/yellow]")


def tail(run_dir: Path, lines: int = 3) -> str:
    out = run_dir / "artifacts" / "ansible" / "stdout"
    text = out.read_text(errors="replace").strip().splitlines() if out.exists() else []
    first_error = next((i for i, line in enumerate(text) if "ERROR" in line), max(0, len(text) - lines))
    return " ".join(" ".join(text[first_error:first_error + lines]).split())[:400] or f"see {run_dir}"


def join(env_path: Path, opts: JoinOptions, console: Console,
         on_rack: Callable[[RackRun], None] | None = None) -> list[RackRun]:
    """Run the selected racks (see `join_fleet`); the rack runs in the order they started."""
    return join_fleet(env_path, opts, console, on_rack).runs


def join_fleet(env_path: Path, opts: JoinOptions, console: Console,
               on_rack: Callable[[RackRun], None] | None = None) -> fleet.FleetResult:
    """Run the selected racks: the first alone (the canary), then up to `opts.parallel` at once (fleet.py).
    A rack with a failed host stops the racks not yet started; the running ones finish."""
    if opts.settings not in SETTINGS:
        raise ValueError(f"settings must be one of {SETTINGS}")
    opts.runs_dir = opts.runs_dir.resolve()  # ansible-runner works from ansible/playbooks: no relative paths
    p = planmod.make(env_path)
    rollout(opts, p)
    public: dict[str, Any] | None = None
    secrets: dict[str, Any] = {}
    data: dict[str, Any] = {}
    if opts.outputs is not None:
        data = outmod.check(contract.read_file(opts.outputs), opts.outputs)
        public, secrets = outmod.split_secrets(data)
    for what, where in (("--runs-dir", opts.runs_dir), ("the templates", TEMPLATES), ("ansible/", ANSIBLE_DIR)):
        inventory.check_path(where, what)
    check_tags(opts.tags)
    selected = select(p, opts)
    lab_vars(p)  # fail early if a lab is not up
    routes: dict[str, receptor.Route] = {}
    if opts.via == "receptor":
        routes = receptor.routes(p, [r for r, _ in selected])  # every node reachable, before any rack starts
    # joins happen only with the control plane's outputs, and not in check mode: only then the bound applies
    joins = opts.outputs is not None and not opts.check
    cancel = threading.Event()

    def stopped(rack: str, left: list[str]) -> None:
        console.print(f"[red]rack {safe(rack)} had failures: racks not started: {safe(', '.join(left))}[/red]")

    def one(rack: str, hosts: list[str]) -> RackRun:
        # in the main thread (the canary) ansible-runner's own Ctrl-C handling stays; rack threads use `cancel`
        in_thread = threading.current_thread() is not threading.main_thread()
        behind = [h for h in hosts if gone is not None and gone.upgrade is not None and h in gone.upgrade.behind
                  and not opts.check]
        run = functools.partial(run_rack, p, rack, board=board, cancel=cancel.is_set if in_thread else None,
                                route=routes.get(rack))
        if not behind:
            return run(hosts, opts, public, secrets, console)
        assert gone is not None and gone.upgrade is not None
        return upgrade_rack(p, rack, hosts, behind, gone.upgrade.target, opts, data, console,
                            lambda batch, o, part: run(batch, o, public, secrets, console, part_of=part))

    with records.private_files():
        gone = leave_first(p, opts, data, public, secrets, console, on_rack, selected)
    with Board(console) as board, records.private_files():
        result = fleet.Fleet(
            selected, one,
            parallel=opts.parallel, budget=fleet.JoinBudget(opts.joins_per_minute if joins else None),
            on_rack=on_rack, on_stop=stopped, cancel=cancel, canary=opts.canary).run()
    if gone is not None:
        result.departed, result.released = [d.name for d in gone.done], gone.released
        result.relabelled = gone.relabelled
    return result


def leave_first(p: planmod.Plan, opts: JoinOptions, data: dict[str, Any], public: dict[str, Any] | None,
                secrets: dict[str, Any], console: Console, on_rack: Callable[[RackRun], None] | None,
                selected: list[tuple[str, list[str]]]) -> departures.Outcome | None:
    """Before any rack joins: drain, reset and delete the nodes that leave (departures.py), then bring the
    remaining Nodes' labels and taints to the plan's (node_objects.py). Both start from the cluster's
    Nodes, so this needs the admin kubeconfig among the outputs. Raises LeaveFailed."""
    kubeconfig = data.get("admin_kubeconfig")
    if not kubeconfig:
        if p.allocation.leaving:
            console.print(f"[yellow]leaving nodes not removed ({safe(', '.join(p.allocation.leaving))}): that needs "
                          "the control plane's outputs with admin_kubeconfig (--outputs)[/yellow]")
        return None
    with cluster(data) as call:
        try:
            nodes = departures.env_nodes(call, p.env.name)
            versions = upgrade.guard(p, upgrade.control_plane(call), nodes, str(p.source))
        except ApiError as exc:  # the racks can still be prepared; their kubeadm join says what is wrong
            console.print(f"[yellow]the cluster did not say which nodes leave or which run an older Kubernetes "
                          f"({safe(exc)}): none leaves, none is upgraded and no Node is relabelled in this run[/yellow]")
            return None
        for line in versions.skew:
            console.print(f"[yellow]version skew: {safe(line)}[/yellow]")
        chosen = {h for _, hosts in selected for h in hosts}
        versions.behind = {n: v for n, v in versions.behind.items() if n in chosen}
        if versions.behind:
            verb = "would upgrade" if opts.check else "to upgrade"
            console.print(f"{verb} to Kubernetes {upgrade.show(versions.target)} (drained a batch at a time): "
                          + safe(", ".join(f"{n} ({v})" for n, v in sorted(versions.behind.items()))))
        found = departures.select(departures.find(p, nodes), opts.rack, opts.limit)
        staying = [n for n in nodes if (n.get("metadata") or {}).get("name") in chosen - {d.name for d in found}]
        if opts.check:
            for d in found:
                console.print(f"would drain, reset and delete {safe(d.describe())} (rack {safe(d.rack)})")
            for name in node_objects.differing(p, staying):
                console.print(f"would bring the labels and taints of Node {safe(name)} to the plan's")
            return departures.Outcome([], {}, [], [], upgrade=versions)
        done = departures.Outcome([], {}, [], [], upgrade=versions)
        if opts.rack is None and not opts.limit and not opts.retry_failed:
            # a leaving range whose Node is gone already (it never joined): nothing to drain
            done.released = departures.release(p, departures.stale_leaving(p, nodes), console)
        if found:
            routes = receptor.routes(p, sorted({d.rack for d in found})) if opts.via == "receptor" else {}
            reset_opts = JoinOptions(**{**opts.__dict__, "tags": None, "check": False})

            def reset(rack: str, hosts: dict[str, str]) -> RackRun:
                run = run_rack(p, rack, list(hosts), reset_opts, public, secrets, console, route=routes.get(rack),
                               playbook=departures.LEAVE_PLAYBOOK,
                               inv_data=departures.reset_inventory(p, hosts, public))
                if on_rack:
                    on_rack(run)
                return run

            released = done.released
            done = departures.leave(p, found, call, console, reset, drain_options(p))
            done.released, done.upgrade = [*released, *done.released], versions
            if done.failed:
                raise departures.LeaveFailed("nodes that leave were not removed, so no rack ran: " + "; ".join(
                    f"{n}: {why}" for n, why in done.failed.items()) + " (fix it and run `skyrack join` again)")
        try:
            done.relabelled = node_objects.reconcile(call, p, staying)
        except ApiError as exc:
            raise departures.LeaveFailed(f"the Nodes' labels and taints could not be brought to the plan's: {exc}") \
                from None
        if done.relabelled:
            console.print(f"labels and taints brought to the plan's: {safe(', '.join(done.relabelled))}")
    return done


def cluster(data: dict[str, Any]) -> contextlib.AbstractContextManager[drainmod.Call]:
    """The API server, as the admin of the control plane's outputs."""
    kubeconfig = data["admin_kubeconfig"]
    ca = readiness.kubeconfig_ca(kubeconfig) or data.get("ca_cert_pem") or ""
    return readiness.client(data["apiserver_endpoint"], ca, kubeconfig, timeout=30)


def drain_options(p: planmod.Plan) -> drainmod.DrainOptions:
    minutes = p.env.join
    return drainmod.DrainOptions(timeout_s=minutes.drain_timeout_minutes * 60,
                                 gang_wait_s=minutes.gang_wait_minutes * 60)


def upgrade_rack(p: planmod.Plan, rack: str, hosts: list[str], behind: list[str], target: upgrade.Version,
                 opts: JoinOptions, data: dict[str, Any], console: Console,
                 run: Callable[[list[str], JoinOptions, Path], RackRun]) -> RackRun:
    """A rack with nodes behind the plan's version: the others joined as always, then the nodes behind
    upgraded a batch at a time (upgrade.py); one record, the parts' runs in it."""
    record = records.new_dir(opts.runs_dir, p.env.name, rack)
    parts: list[RackRun] = []
    failed: dict[str, str] = {}
    not_run: list[str] = []
    current = [h for h in hosts if h not in behind]
    if current:
        parts.append(run(current, opts, record))
        failed.update({h.host: h.message or h.result for h in parts[-1].hosts if h.bad})
    if len(failed) * 100 > upgrade.MAX_FAIL_PERCENT * max(len(current), 1):
        not_run = behind
    else:
        upgrading = dataclasses.replace(opts, extravars={**opts.extravars, "skyrack_upgrading": True})

        def play(batch: list[str]) -> dict[str, str]:
            parts.append(run(batch, upgrading, record))
            return {h.host: h.message or h.result for h in parts[-1].hosts if h.bad}

        with cluster(data) as call:
            roll = upgrade.Roll(call, target, p.env.join.upgrade_serial, drain_options(p),
                                log=lambda m: console.print(f"rack {safe(rack)}: {safe(m)}"))
            bad, not_run = roll.run(behind, play)
        failed.update(bad)
    return keep_parts(p, rack, record, hosts, parts, failed, not_run, opts, console)


def keep_parts(p: planmod.Plan, rack: str, record: Path, hosts: list[str], parts: list[RackRun],
               failed: dict[str, str], not_run: list[str], opts: JoinOptions, console: Console) -> RackRun:
    """One rack run of its parts: every host's last result, a drain's or a wait's failure, the hosts never run."""
    started = parts[0].started if parts else time.time()
    result = RackRun(env=p.env.name, rack=rack, check=opts.check, record=str(record), started=started,
                     tags=list(opts.tags or []), via=parts[0].via if parts else "local")
    last = {h.host: h for part in parts for h in part.hosts}
    for name in hosts:
        hr = last.get(name) or HostResult(host=name, rack=rack)
        if name in not_run and name not in last:
            hr.message = "not run: an earlier upgrade batch of this rack failed (max_fail_percentage)"
        elif name in failed and not hr.bad:
            hr.result, hr.message = "failed", failed[name]
        result.hosts.append(hr)
    result.ended = time.time()
    result.seconds = round(result.ended - started, 1)
    result.rc = max([part.rc for part in parts] + [1 if result.failed_hosts else 0])
    result.status = "failed" if result.failed_hosts else "successful"
    keep(result, opts, console)
    return result


def rollout(opts: JoinOptions, p: planmod.Plan) -> None:
    """Fill what the command line left unset from the environment file's `join:` section."""
    file = p.env.join
    opts.parallel = file.parallel if opts.parallel is None else opts.parallel
    opts.canary = file.canary if opts.canary is None else opts.canary
    opts.joins_per_minute = file.joins_per_minute if opts.joins_per_minute is None else opts.joins_per_minute
    if opts.parallel < 1 or opts.joins_per_minute < 1:
        raise ValueError("parallel and joins_per_minute must be at least 1")


def summary_json(result: fleet.FleetResult) -> str:
    runs = result.runs
    return json.dumps({"ok": all(not fleet.failed(r) for r in runs) and not result.not_started,
                       "parallel": result.parallel, "canary": result.canary, "racks": [r.to_dict() for r in runs],
                       "not_started": result.not_started, "stopped_by": result.stopped_by,
                       "departed": result.departed, "released": result.released,
                       "relabelled": result.relabelled}, indent=2)
