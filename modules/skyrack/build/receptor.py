"""Receptor, the mesh that carries rack runs to execution nodes (`skyrack join --via receptor`).

Built from its Go module (`github.com/ansible/receptor`, command `cmd/receptor-cl`) at the
version of `skyrack.upstream.RECEPTOR_VERSION` (`programs.RECEPTOR`), cached like the
Kubernetes builds: `<cache>/build/receptor/<version>-<recipe>/bin/receptor`.
"""

from __future__ import annotations

from pathlib import Path

from .cache import Entry, Say
from .programs import RECEPTOR, build


def entry() -> Entry:
    return RECEPTOR.entry()


def binary(say: Say = print) -> Path:
    """The receptor binary, built once per version and recipe."""
    return build(RECEPTOR, say) / "receptor"
