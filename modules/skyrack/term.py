"""What reaches a terminal: every value and path printed through Rich goes through `safe`.

A value from an environment file, a path from the command line or a message from a remote
host may hold Rich markup (`[/]` crashes the printer, `[link=...]` disguises text) or control
characters (ESC sequences repaint the screen, bidi overrides reorder it). `safe` makes both
inert: control characters become visible escapes, markup is escaped.
"""

from __future__ import annotations

from rich.markup import escape

from .errors import printable


def safe(value: object) -> str:
    """A value or path as it may be printed: control characters escaped, Rich markup inert."""
    return escape(printable(value))
