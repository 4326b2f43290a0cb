"""Errors a user can act on: every problem names the file, the field and what is wrong.

Bad input never surfaces as a traceback. Code that finds a problem raises
`InputError` with one or more `Problem`s; the CLI prints them one per line as
``file: path.to.field: message`` and exits 1.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

# Exit codes of every command (README, "Bad input").
EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: object) -> str:
    """`text` with every control character (newlines, ESC, bidi overrides) shown as an escape."""
    s = str(text)
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), s) if _CONTROL.search(s) else s


@dataclass(frozen=True)
class Problem:
    file: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.path}: {self.message}" if self.path else f"{self.file}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


class InputError(Exception):
    """The input (a file, a flag, a host) is wrong; carries every problem found."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def format_path(loc: Iterable[object]) -> str:
    """Turn a location tuple like ('racks', 3, 'nodes', 12, 'ip') into racks[3].nodes[12].ip."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def os_problem(label: str, exc: OSError, doing: str = "cannot read") -> Problem:
    """An OSError as a Problem: 'no such file', or what the system said (no traceback)."""
    if exc.errno == errno.ENOENT:
        return Problem(label, "", "no such file")
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return Problem(label, "", f"{doing}: {reason}")
