"""Schedule rack runs: a canary rack alone, then up to N racks at once, within a bound on joins per minute.

The per-rack run is `driver.run_rack`; this module only decides when each rack starts:

- the first selected rack is the canary: it runs alone, and if any of its hosts fails no
  other rack starts (`canary=False` leaves this step out);
- then up to `parallel` racks run at once (threads: each rack's work is an ansible-playbook
  process, the threads only wait on it and handle its events);
- a rack with a failed host stops new racks from starting; the racks already running finish
  (stopping them half-way would leave more hosts half-configured, not fewer);
- racks are admitted no faster than the control plane's bound on joins per minute
  (`JoinBudget`, reason in docs/join.md); a rack counts one join per host.

With `parallel=1` this is the serial join: racks in file order, the first failure stops the rest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from ..config.schema import Join
from .records import RackRun

DEFAULT_JOINS_PER_MINUTE = Join().joins_per_minute  # the environment file's `join.joins_per_minute`


class JoinBudget:
    """A token bucket of kubeadm joins: `per_minute` tokens, refilled continuously.

    A rack of n hosts may start once the bucket holds min(n, per_minute) tokens and then takes n
    (the bucket may go below zero: a rack larger than the bound starts alone and the racks after it
    wait for its debt to be repaid), so over any long stretch joins are admitted at `per_minute`."""

    def __init__(self, per_minute: int | None, clock: Callable[[], float] = time.monotonic):
        if per_minute is not None and per_minute < 1:
            raise ValueError("per_minute must be at least 1")
        self.per_minute = per_minute
        self.clock = clock
        self.tokens = float(per_minute or 0)
        self.at = clock()

    def _refill(self) -> None:
        now = self.clock()
        if self.per_minute is not None:
            self.tokens = min(float(self.per_minute), self.tokens + (now - self.at) * self.per_minute / 60.0)
        self.at = now

    def wait_for(self, joins: int) -> float:
        """Seconds until a rack of `joins` hosts may start (0: now)."""
        if self.per_minute is None or joins == 0:
            return 0.0
        self._refill()
        need = min(joins, self.per_minute) - self.tokens
        return max(0.0, need * 60.0 / self.per_minute)

    def take(self, joins: int) -> None:
        if self.per_minute is not None:
            self._refill()
            self.tokens -= joins


@dataclass
class FleetResult:
    runs: list[RackRun] = field(default_factory=list)  # in the order the schedule started the racks
    not_started: list[str] = field(default_factory=list)  # racks the failure policy kept from starting
    stopped_by: str | None = None  # the rack whose failure stopped the others
    parallel: int = 1  # the schedule it ran with
    canary: bool = True
    departed: list[str] = field(default_factory=list)  # nodes drained, reset and deleted first (departures.py)
    released: list[str] = field(default_factory=list)  # and of those, the removed ones whose ranges the lock let go
    relabelled: list[str] = field(default_factory=list)  # Nodes whose labels and taints were brought to the plan's


RunRack = Callable[[str, list[str]], RackRun]


def failed(run: RackRun) -> bool:
    return bool(run.failed_hosts) or run.rc != 0


@dataclass
class Fleet:
    """One fleet run's schedule (see the module docstring); `run()` returns what happened."""

    selected: list[tuple[str, list[str]]]
    run_rack: RunRack
    parallel: int = 1
    budget: JoinBudget = field(default_factory=lambda: JoinBudget(None))
    on_rack: Callable[[RackRun], None] | None = None
    on_stop: Callable[[str, list[str]], None] | None = None  # (failed rack, racks not started)
    sleep: Callable[[float], None] = time.sleep
    cancel: threading.Event = field(default_factory=threading.Event)  # set: running racks are cancelled
    canary: bool = True  # False: the first racks start together too (a change already proven elsewhere)

    def __post_init__(self) -> None:
        if self.parallel < 1:
            raise ValueError("parallel must be at least 1")
        self.result = FleetResult(parallel=self.parallel, canary=self.canary)
        self.pending = list(self.selected)
        self.running: dict[Future[RackRun], str] = {}

    def run(self) -> FleetResult:
        if not self.pending:
            return self.result
        if self.canary:
            rack, hosts = self.pending.pop(0)  # alone, and nothing else starts if it fails
            self.budget.take(len(hosts))
            self._done(self.run_rack(rack, hosts))
            if not self.pending:
                return self.result  # one rack, or the canary failed
        error: BaseException | None = None
        with ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="rack") as pool:
            try:
                self._loop(pool)
            except BaseException as exc:  # Ctrl-C or a bug: no new rack, the running ones are cancelled
                error = exc
                self.pending.clear()
                self.cancel.set()
            for fut in list(self.running):  # the executor waits for them anyway: keep what they report
                try:
                    self._done(fut.result())
                except Exception as exc:  # the first error is raised below
                    error = error or exc
        if error is not None:
            raise error
        # the order the schedule admitted them (two racks started together may stamp their start either way)
        admitted = {rack: i for i, (rack, _) in enumerate(self.selected)}
        self.result.runs.sort(key=lambda r: admitted.get(r.rack, len(admitted)))
        return self.result

    def _loop(self, pool: ThreadPoolExecutor) -> None:
        while self.pending or self.running:
            while self.pending and len(self.running) < self.parallel:
                rack, hosts = self.pending[0]
                delay = self.budget.wait_for(len(hosts))
                if delay > 0:
                    if not self.running:
                        self.sleep(delay)
                        continue
                    finished, _ = wait(self.running, timeout=delay, return_when=FIRST_COMPLETED)
                    if finished:
                        break
                    continue
                self.pending.pop(0)
                self.budget.take(len(hosts))
                self.running[pool.submit(self.run_rack, rack, hosts)] = rack
            if self.running:
                finished, _ = wait(self.running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    self.running.pop(fut)
                    self._done(fut.result())

    def _done(self, run: RackRun) -> None:
        self.result.runs.append(run)
        if self.on_rack:
            self.on_rack(run)
        if failed(run) and self.result.stopped_by is None:
            self.result.stopped_by = run.rack
            self.result.not_started = [r for r, _ in self.pending]
            self.pending.clear()
            if self.on_stop and self.result.not_started:
                self.on_stop(run.rack, self.result.not_started)
