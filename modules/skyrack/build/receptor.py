"""Receptor, the mesh that carries rack runs to execution nodes (`skyrack join --via receptor`).

Built from its Go module (`github.com/ansible/receptor`, command `cmd/receptor-cl`) in a
wrapper module at the version of `skyrack.upstream.RECEPTOR_VERSION`, cached like the
Kubernetes builds: `<cache>/build/receptor/<version>-<recipe>/bin/receptor`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..upstream import RECEPTOR_GO, RECEPTOR_VERSION
from . import go
from .cache import BuildError, Entry, Say, ensure

RECIPE_VERSION = 1
MODULE = "github.com/ansible/receptor"


def entry() -> Entry:
    return Entry("receptor", RECEPTOR_VERSION, {"recipe": RECIPE_VERSION, "go": go.version(), "module": MODULE})


def binary(say: Say = print) -> Path:
    """The receptor binary, built once per version and recipe."""
    e = entry()

    def build(out: Path) -> None:
        with e.log().open("w") as log:
            src = out / "src"
            src.mkdir()
            (src / "go.mod").write_text(f"module skyrack.invalid/receptor-build\n\ngo {RECEPTOR_GO}\n\n"
                                        f"require {MODULE} {RECEPTOR_VERSION}\n")
            # the version receptor reports (its Makefile stamps it the same way)
            ldflags = f"-s -w -X {MODULE}/internal/version.Version={RECEPTOR_VERSION.lstrip('v')}"
            go.build(["-mod=mod", "-trimpath", "-ldflags", ldflags, "-o", str(out / "bin/receptor"),
                      f"{MODULE}/cmd/receptor-cl"], src, e, log, say)
            proc = subprocess.run([str(out / "bin/receptor"), "--version"], capture_output=True, text=True,
                                  timeout=60, check=False)
            log.write(f"receptor --version: {proc.stdout.strip()} {proc.stderr.strip()}\n")
            if proc.returncode != 0:
                raise BuildError(f"receptor {RECEPTOR_VERSION}: the built binary does not run; see {log.name}")
            shutil.rmtree(src)
    go.require_go()
    return ensure(e, build, say) / "bin/receptor"
