"""Rack runs on execution nodes through Receptor (`skyrack join --via receptor`): ansible-runner's own remote execution.

The same run `driver.run_rack` makes locally, handed over the way AWX does it:
`ansible-runner transmit` packs the run (its private data directory: inventory, project,
settings) into a stream, `receptor work submit` sends it to the rack's execution node, where
`ansible-runner worker` runs it, and the worker's stream (events, status, artifacts) comes
back through `receptor work results` into `ansible-runner process`, which hands every event
to the same progress and collector a local run uses and writes the same artifacts.

The environment file's `execution:` section names the controller's Receptor control socket
and which execution node serves which racks. Before any rack starts, the socket must answer
and every needed node must be in Receptor's routing table; during a run a watchdog checks the
rack's node, and a node that leaves the mesh ends that rack's run as failed (its hosts are
"not run", so `--retry-failed` runs them again).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from socket import SHUT_RDWR
from typing import IO, Any

import ansible_runner

from .. import inventory
from .. import plan as planmod
from ..errors import InputError, Problem
from ..render import cloud_init
from .node_files import ANSIBLE_DIR, TEMPLATES

WORK_TYPE = cloud_init.RECEPTOR_WORK_TYPE  # the execution node's receptor `work-command` (its user-data)
WATCH_EVERY = 2.0  # seconds between checks that the rack's node is still in the mesh
WORKER_DIR = "/dev/shm"  # noqa: S108 - where the worker unpacks a run on the node: memory, removed after (--delete)
# How long a work unit may stay Pending (not yet on its node) while the node is still in the mesh (one that
# leaves fails the rack at once), and how often it is submitted afresh. Receptor 1.4 makes one attempt to
# start a unit on its node at once; when that fails (the node's control service must answer within 5 s, and
# a loaded node may not), it retries in the background with a backoff growing 1.5x from 1 s to a minute, and
# if that background start itself fails the unit stays Pending for good (remote_work.go). CI runs on a loaded
# machine lost a rack at a 60 s bound that way, twice. So: 90 s per unit, then a unit the node never took
# (no remote unit ID: nothing can start there) is released and submitted again, three units in all.
HANDOFF_TIMEOUT = 90.0
HANDOFF_ATTEMPTS = 3
SECRETS_FILE = "skyrack-secrets.yml"  # in the staged run's env/ (memory), never in the record


class NodeLost(RuntimeError):
    """The execution node left the mesh during a run."""


class WorkFailed(RuntimeError):
    """The work unit ended without a run (the worker could not start or died): the reason, for the report."""


class NotTaken(WorkFailed):
    """The work unit stayed Pending on the controller; `on_node`: the node had created its side of it."""

    def __init__(self, message: str, on_node: bool):
        super().__init__(message)
        self.on_node = on_node


@dataclass(frozen=True)
class Route:
    socket: str
    node: str


def _control(socket: str):
    from receptorctl.socket_interface import ReceptorControl

    return ReceptorControl(socket)


def status(socket: str) -> dict[str, Any]:
    rc = _control(socket)
    try:
        return rc.simple_command("status")
    finally:
        rc.close()


def routes(p: planmod.Plan, racks: list[str]) -> dict[str, Route]:
    """Each rack's execution node; InputError (before any rack starts) for a rack no node serves,
    a socket that does not answer, or a node Receptor cannot reach."""
    src = str(p.source)
    ex = p.env.execution
    if ex is None:
        raise InputError([Problem(src, "execution", "--via receptor needs an `execution:` section "
                                                    "(receptor_socket, and nodes with the racks each serves)")])
    serving = {r: x.name for x in ex.nodes for r in x.racks}
    missing = [r for r in racks if r not in serving]
    if missing:
        raise InputError([Problem(src, "execution.nodes", f"no execution node serves rack(s) {', '.join(missing)}")])
    try:
        st = status(ex.receptor_socket)
    except (OSError, RuntimeError, ValueError) as exc:
        raise InputError([Problem(src, "execution.receptor_socket",
                                  f"Receptor does not answer on {ex.receptor_socket}: {exc}")]) from None
    known = set(st.get("RoutingTable") or {}) | {st.get("NodeID")}
    problems = []
    for xi, x in enumerate(ex.nodes):
        if x.name not in known and any(r in racks for r in x.racks):
            problems.append(Problem(src, f"execution.nodes[{xi}].name",
                                    f"execution node {x.name!r} is not reachable through Receptor "
                                    f"(reachable: {', '.join(sorted(n for n in known if n)) or 'none'})"))
    if problems:
        raise InputError(problems)
    return {r: Route(ex.receptor_socket, serving[r]) for r in racks}


def worker_dir(run_dir: Path) -> str:
    """Where the worker on the execution node unpacks this run (memory; --delete removes it after)."""
    return f"{WORKER_DIR}/skyrack-{run_dir.name}"


def ship_project(run_dir: Path) -> None:
    """The project the worker runs: ansible/ (playbooks, roles, collections, ansible.cfg) and the templates."""
    dest = run_dir / "project"
    shutil.copytree(ANSIBLE_DIR, dest, ignore=shutil.ignore_patterns(".ansible*", "__pycache__"))
    shutil.copytree(TEMPLATES, dest / "templates", ignore=shutil.ignore_patterns("__pycache__"))


class Watchdog:
    """Checks every few seconds that `node` is still in the mesh; on loss, closes the result stream."""

    def __init__(self, route: Route, on_lost: Callable[[], None], cancel: Callable[[], bool] | None):
        self.route, self.on_lost, self.cancel = route, on_lost, cancel
        self.lost = False
        self.cancelled = False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True, name=f"watch-{route.node}")

    def _watch(self) -> None:
        while not self.stop.wait(WATCH_EVERY):
            if self.cancel and self.cancel():
                self.cancelled = True
                self.on_lost()
                return
            try:
                table = status(self.route.socket).get("RoutingTable") or {}
            except (OSError, RuntimeError, ValueError):
                table = {}
            if self.route.node not in table:
                self.lost = True
                self.on_lost()
                return

    def __enter__(self) -> Watchdog:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def memory_dir() -> str | None:
    """A memory filesystem for what holds secrets (a work payload); None where there is none."""
    return "/dev/shm" if Path("/dev/shm").is_dir() else None  # noqa: S108 - tempfile makes private files in it


def run(route: Route, run_dir: Path, kwargs: dict[str, Any], event_handler: Callable[[dict], bool],
        cancel: Callable[[], bool] | None, secrets: dict[str, Any] | None = None) -> tuple[str, int | None]:
    """transmit -> work submit -> (worker on the node) -> work results -> process; (status, rc).

    `secrets` (the join's bootstrap token) never touch the run's record: the run is packed from a copy of
    its directory on a memory filesystem, the secrets a 0600 `-e @file` inside that copy (`!unsafe` YAML,
    as a local run reads them), the payload a 0600 file in memory too; Receptor keeps work units in
    memory (its datadir on tmpfs, both ends), and the worker unpacks the run into /dev/shm on the node
    and deletes it when the run ends. What comes back (events, artifacts) is what a local run records."""
    with tempfile.TemporaryDirectory(prefix="skyrack-stage-", dir=memory_dir()) as stage, \
            tempfile.NamedTemporaryFile(prefix="skyrack-payload-", dir=memory_dir()) as payload:
        staged = Path(stage) / run_dir.name
        shutil.copytree(run_dir, staged)
        cmdline = [kwargs["cmdline"]] if kwargs.get("cmdline") else []
        (staged / "env").mkdir(exist_ok=True)
        (run_dir / "env").mkdir(exist_ok=True)
        if secrets:
            inventory.write_secret_vars(staged / "env" / SECRETS_FILE, secrets)
            cmdline = ["-e", f"@{worker_dir(run_dir)}/env/{SECRETS_FILE}", *cmdline]
        ansible_runner.run(streamer="transmit", _output=payload, private_data_dir=str(staged),
                           **{**kwargs, "cmdline": " ".join(cmdline) or None})
        for f in (staged / "env").iterdir():  # what ansible-runner wrote there (settings, extravars): the record's
            if f.name != SECRETS_FILE and not (run_dir / "env" / f.name).exists():
                shutil.copy2(f, run_dir / "env" / f.name)
        payload.flush()
        unit_id = _hand_off(route, run_dir, payload.file)
    try:
        sock, sockfile = _control(route.socket).get_work_results(unit_id, return_socket=True, return_sockfile=True)
    except (OSError, RuntimeError, ValueError) as exc:
        _release(route.socket, unit_id)
        raise WorkFailed(f"no results from execution node {route.node}: {exc}") from None

    def lost() -> None:
        # shut the socket down, not close the file: close() would wait for the reader's lock, while a
        # shutdown makes the blocked read return end-of-stream
        with contextlib.suppress(OSError):
            sock.shutdown(SHUT_RDWR)

    explained: list[str] = []

    def on_status(data: dict, runner_config: object = None) -> None:
        if data.get("job_explanation"):
            explained.append(str(data["job_explanation"]))

    try:
        with Watchdog(route, lost, cancel) as dog:
            try:
                r = ansible_runner.run(streamer="process", _input=sockfile, private_data_dir=str(run_dir),
                                       event_handler=event_handler, status_handler=on_status, quiet=True,
                                       ident=kwargs.get("ident"))
                outcome: tuple[str, int | None] = (r.status, r.rc if r.rc is not None else _rc(r.artifact_dir))
            except (OSError, ValueError):  # the stream was closed under it
                outcome = ("error", None)
        if dog.lost:
            raise NodeLost(f"execution node {route.node} left the Receptor mesh during the run")
        if dog.cancelled:
            return "canceled", None
        if outcome[0] == "error":
            detail = work_detail(route.socket, unit_id)
            raise WorkFailed(f"the work unit on {route.node} failed: {'; '.join(explained) or 'no explanation'}"
                             + (f" ({detail})" if detail else ""))
        return outcome
    finally:
        sockfile.close()
        sock.close()
        _release(route.socket, unit_id)


def _submit(route: Route, run_dir: Path, payload: IO[bytes]) -> str:
    """One work unit for the node, the payload (from where it stands) its stdin; its ID."""
    ctl = _control(route.socket)
    try:
        # the worker unpacks into its own directory and deletes it when the job ends
        # tlsclient: the controller's Receptor hands the work to the node over TLS and checks that the
        # node's certificate names it (a node claiming another's ID gets no work)
        # signwork: execution nodes run only work signed with the controller's key
        unit = ctl.submit_work(WORK_TYPE, payload, node=route.node, tlsclient=cloud_init.RECEPTOR_TLS,
                               signwork=True, params={"params": f"--private-data-dir={worker_dir(run_dir)} --delete"})
    except (OSError, RuntimeError, ValueError) as exc:  # the node went away between the check and now
        raise WorkFailed(f"could not hand the run to execution node {route.node}: {exc}") from None
    finally:
        ctl.close()
    return str(unit["unitid"])


def _hand_off(route: Route, run_dir: Path, payload: IO[bytes], attempts: int = HANDOFF_ATTEMPTS,
              timeout: float = HANDOFF_TIMEOUT) -> str:
    """Submit the run until its node takes it (see HANDOFF_TIMEOUT): the ID of the unit it took. A unit left
    Pending that the node never created is released before the next is submitted, so the run starts once."""
    for attempt in range(1, attempts + 1):
        payload.seek(0)
        unit_id = _submit(route, run_dir, payload)
        try:
            _wait_handed_off(route, unit_id, timeout)
            return unit_id
        except NotTaken as exc:
            if exc.on_node or attempt == attempts:
                raise
    raise AssertionError("unreachable")


def _wait_handed_off(route: Route, unit_id: str, timeout: float = HANDOFF_TIMEOUT) -> None:
    """Until the work unit has left Pending (the node took it). A node whose certificate does not name it
    never does: the controller's Receptor refuses to hand it work (and logs RVF ReceptorNameError)."""
    deadline = time.monotonic() + timeout
    while True:
        ctl = _control(route.socket)
        try:
            st = ctl.simple_command(f"work status {unit_id}")
            table = ctl.simple_command("status").get("RoutingTable") or {}
        except (OSError, RuntimeError, ValueError):
            st, table = {}, {route.node: None}  # the controller's socket hiccupped: ask again, to the deadline
        finally:
            ctl.close()
        if st.get("StateName", "Pending") != "Pending":
            return
        if route.node not in table:
            _release(route.socket, unit_id)
            raise NodeLost(f"execution node {route.node} left the Receptor mesh before it took the work")
        if time.monotonic() > deadline:
            _release(route.socket, unit_id)
            on_node = bool((st.get("ExtraData") or {}).get("RemoteUnitID"))
            raise NotTaken(f"execution node {route.node} did not take the work within {timeout:.0f} s "
                             f"({' '.join(str(st.get('Detail', '')).split())[:200] or 'no detail'}); over the mesh's "
                             f"TLS it must present a certificate naming {route.node} (the controller's Receptor "
                             f"log says RVF ReceptorNameError otherwise)", on_node)
        time.sleep(1.0)


def _rc(artifact_dir: str) -> int | None:
    """ansible-playbook's exit code, from the artifacts the worker sent back (process() does not set it)."""
    try:
        return int((Path(artifact_dir) / "rc").read_text().strip())
    except (OSError, ValueError):
        return None


def work_detail(socket: str, unit_id: str) -> str:
    """Receptor's own word on a work unit (the worker's exit and stderr, as `work status` reports it)."""
    ctl = _control(socket)
    try:
        st = ctl.simple_command(f"work status {unit_id}")
        return " ".join(str(st.get("Detail", "")).split())[:300]
    except (OSError, RuntimeError, ValueError):
        return ""
    finally:
        ctl.close()


def _release(socket: str, unit_id: str) -> None:
    """Cancel and forget the work unit (on a lost node Receptor releases it when the node returns)."""
    for cmd in (f"work cancel {unit_id}", f"work release {unit_id}"):
        ctl = _control(socket)
        try:
            ctl.simple_command(cmd)
        except (OSError, RuntimeError, ValueError):
            pass
        finally:
            ctl.close()
