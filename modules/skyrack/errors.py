"""Errors a user can act on: every problem names the file, the field and what is wrong.

Bad input never surfaces as a traceback. Code that finds a problem raises
`InputError` with one or more `Problem`s; the CLI prints them one per line as
``file: path.to.field: message`` and exits 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass


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
