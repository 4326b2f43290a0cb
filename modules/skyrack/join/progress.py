"""Live per-host progress of a rack run, and the closing tables.

ansible-runner hands every event to `Progress.event`; on a terminal a live table shows
each host's current task and counts, elsewhere (CI logs) one line per failure and per
finished host. Racks run in parallel share one `Board`: one live view with a table per
running rack. `summary_table` and `skipped_table` are what `skyrack join` ends with.
"""

from __future__ import annotations

import threading
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from ..term import safe
from .records import HostResult, RackRun

STYLE = {"ok": "green", "failed": "red", "unreachable": "red", "not run": "yellow"}


class Board:
    """The one live view of every rack that is running (racks run in parallel threads)."""

    def __init__(self, console: Console):
        self.console = console
        self.racks: list[Progress] = []
        self.lock = threading.RLock()
        self.live: Live | None = None

    def __enter__(self) -> Board:
        if self.console.is_terminal:
            self.live = Live(self.render(), console=self.console, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.__exit__(None, None, None)

    def render(self) -> Group:
        return Group(*(r.render() for r in self.racks))

    def add(self, progress: Progress) -> None:
        with self.lock:
            self.racks.append(progress)
            self.refresh()

    def remove(self, progress: Progress) -> None:
        with self.lock:
            self.racks.remove(progress)
            self.refresh()

    def refresh(self) -> None:
        with self.lock:
            if self.live:
                self.live.update(self.render())

    def line(self, text: str) -> None:
        with self.lock:
            (self.live.console if self.live else self.console).print(text)


class Progress:
    """One rack's hosts: their current task and counts, shown on a Board (its own, or the fleet's)."""

    def __init__(self, console: Console, rack: str, hosts: list[str], board: Board | None = None):
        self.console = console
        self.rack = rack
        self.task: dict[str, str] = dict.fromkeys(hosts, "waiting")
        self.counts: dict[str, dict[str, int]] = {h: dict.fromkeys(("ok", "changed", "failed", "unreachable"), 0)
                                                  for h in hosts}
        self.shared = board is not None
        self.board = board or Board(console)

    def __enter__(self) -> Progress:
        if not self.shared:
            self.board.__enter__()
        self.board.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.board.remove(self)
        if not self.shared:
            self.board.__exit__(None, None, None)

    def render(self) -> Table:
        t = Table("host", "ok", "changed", "failed", "now", title=f"rack {self.rack}", title_justify="left")
        for host, task in self.task.items():
            c = self.counts[host]
            t.add_row(safe(host), str(c["ok"]), str(c["changed"]), str(c["failed"] + c["unreachable"]), safe(task))
        return t

    def event(self, ev: dict[str, Any]) -> bool:
        kind = ev.get("event", "")
        data = ev.get("event_data", {})
        host = data.get("host")
        if host in self.task:
            if kind == "runner_on_start":
                self.task[host] = data.get("task", "")
            elif kind == "runner_on_ok":
                self.counts[host]["ok"] += 1
                self.counts[host]["changed"] += bool(data.get("res", {}).get("changed"))
            elif kind == "runner_on_failed" and not data.get("ignore_errors"):
                self.counts[host]["failed"] += 1
                self.task[host] = f"FAILED: {data.get('task', '')}"
                self._line(f"[red]{safe(host)}[/red] failed: {safe(data.get('task', ''))}: "
                           f"{safe(message(data.get('res', {})))}")
            elif kind == "runner_on_unreachable":
                self.counts[host]["unreachable"] += 1
                self.task[host] = "UNREACHABLE"
                self._line(f"[red]{safe(host)}[/red] unreachable: {safe(message(data.get('res', {})))}")
        if kind == "playbook_on_stats":
            for h in self.task:
                if not self.task[h].startswith(("FAILED", "UNREACHABLE")):
                    self.task[h] = "done"
        self.board.refresh()
        return True

    def _line(self, text: str) -> None:
        self.board.line(text)  # host names are unique in an environment: no rack prefix needed


def message(res: dict[str, Any]) -> str:
    msg = res.get("msg") or res.get("stderr") or res.get("reason") or ""
    return " ".join(str(msg).split())[:300]


def summary_table(runs: list[RackRun]) -> Table:
    t = Table("rack", "host", "ok", "changed", "skipped", "failed", "unreachable", "result",
              title="skyrack join" + (" (check mode)" if any(r.check for r in runs) else ""), title_justify="left")
    for run in runs:
        for h in run.hosts:
            style = STYLE.get(h.result, "")
            t.add_row(safe(h.rack), safe(h.host), str(h.ok), str(h.changed), str(h.skipped), str(h.failed),
                      str(h.unreachable), f"[{style}]{safe(h.result)}[/{style}]" if style else safe(h.result))
    return t


def error_lines(runs: list[RackRun]) -> list[str]:
    """One line per bad host, escaped for printing with markup."""
    return [safe(f"{h.host}: {h.result}: {h.message}") for r in runs for h in r.hosts if h.bad]


def skipped_table(hosts: list[HostResult]) -> Table | None:
    """What did not apply, grouped: one row per (item, reason) with the hosts it concerns."""
    groups: dict[tuple[str, str], list[str]] = {}
    for h in hosts:
        for r in h.report:
            if r.get("status") == "skipped":
                groups.setdefault((r["item"], r["reason"]), []).append(h.host)
    if not groups:
        return None
    total = len(hosts)
    t = Table("skipped", "why", "hosts", title="Not applied on these hosts (with the reason)", title_justify="left")
    for (item, reason), names in groups.items():
        t.add_row(safe(item), safe(reason), f"all {total}" if len(names) == total and total > 1 else safe(", ".join(names)))
    return t
