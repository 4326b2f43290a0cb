"""Helper daemons this machine runs for a lab or a test (the apt proxy, Azurite).

Each runs in its own session (it outlives the command that started it), logs to a file,
is ready when it accepts TCP connections, and is recognised by a marker in its command
line, so a recycled PID is never mistaken for it (or killed).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def alive(pid: int | None, marker: str) -> bool:
    if not pid:
        return False
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def start(cmd: Sequence[str], *, name: str, listen: tuple[str, int], log: Path, timeout: float,
          error: type[Exception] = RuntimeError, env: Mapping[str, str] | None = None) -> int:
    """Start `cmd` detached, wait until it listens on `listen`; return its PID. Raises `error` if it does not."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, env=dict(env) if env is not None else None)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise error(f"{name} exited at start (code {proc.returncode}); see {log}")
        try:
            with socket.create_connection(listen, timeout=0.5):
                return proc.pid
        except OSError:
            time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)
    raise error(f"{name} did not listen on {listen[0]}:{listen[1]} within {timeout:.0f} s; see {log}")


def stop(pid: int | None, marker: str, timeout: float = 10) -> bool:
    """SIGTERM the daemon's process group, SIGKILL after `timeout`. False if it was not running."""
    if not alive(pid, marker):
        return False
    assert pid is not None
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid, marker) and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # reap it when it is our own child
        except ChildProcessError:
            pass
        time.sleep(0.1)
    if alive(pid, marker):
        _signal_group(pid, signal.SIGKILL)
    return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
