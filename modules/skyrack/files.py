"""Reading input files and writing state, the one way each is done.

`read_text`: size-limited, UTF-8, and every way reading can fail (missing, a directory, a
device, a symlink loop, a name too long, not UTF-8) is a `Problem`, never a traceback.
`atomic_write`: the lock file and other state that must never be half-written.
`write_private`: a file only its owner may read. `is_env_file`: which files of configs/ are environments.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import InputError, Problem, os_problem


def is_env_file(name: str) -> bool:
    """configs/<env>.yaml, not its lock file nor Pulumi's stack settings."""
    return name.endswith(".yaml") and not name.endswith(".lock.yaml") and not name.startswith("Pulumi.")


def read_text(path: Path, max_bytes: int) -> str:
    """A UTF-8 text file of at most max_bytes; InputError for anything else (missing, a directory,
    a device, a symlink loop, a name too long, too large, not UTF-8)."""
    label = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except IsADirectoryError:
        raise InputError([Problem(label, "", "cannot read: is a directory")]) from None
    except OSError as exc:
        raise InputError([os_problem(label, exc)]) from None
    except ValueError as exc:  # e.g. a NUL byte in the name
        raise InputError([Problem(label, "", f"cannot read: {exc}")]) from None
    if len(data) > max_bytes:
        raise InputError([Problem(label, "", f"larger than {max_bytes // 1024} KiB: not a skyrack file")])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError([Problem(label, "", f"not UTF-8 text (byte {exc.start})")]) from None


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """An advisory lock on the directory itself (flock): no lock file to leave behind."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def atomic_write(path: Path, text: str, mode: int = 0o644) -> bool:
    """Replace `path` with `text` atomically unless it already holds it. Returns True when written.

    A unique temporary file in the same directory, fsync'd, renamed over the file, the directory
    fsync'd; under an advisory lock so concurrent writers never interleave. On any failure the
    file is unchanged and the temporary file is gone. Raises InputError naming the file."""
    tmp: str | None = None
    try:
        with _directory_lock(path.parent):
            try:
                if path.read_text() == text:
                    return False
            except (FileNotFoundError, UnicodeDecodeError):
                pass
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
            tmp = None
            dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        return True
    except OSError as exc:
        raise InputError([os_problem(str(path), exc, "cannot write")]) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (0600), never through a symlink."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
