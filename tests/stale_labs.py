"""Take down labs an earlier test run left behind, before `./dev test` starts a new one.

Every lab node runs as the host's root, and all of them share root's inotify instances (128 here:
docs/lab.md). A test run that was killed (a stopped session, a timed-out CI job) can leave its labs
up, and the next run's nodes then fail to boot ("SSH did not answer", "no CRI"). A lab made by the
test suite is recognised by its environment file: one of pytest's temporary files (or gone). A
developer's own lab (configs/lab.yaml, or any file outside pytest's temporary directories) is never
touched; it is reported, since it holds instances the tests will need.

Run by `./dev test` before the whole suite: `python -m stale_labs [BRIDGE...]` (only those bridges).
"""

from __future__ import annotations

import getpass
import os
import sys
import tempfile
from pathlib import Path

from skyrack.lab import hostlimits, lifecycle


def pytest_root() -> Path:
    # pytest's own base: $PYTEST_DEBUG_TEMPROOT or the temp dir, then pytest-of-<user> (_pytest.tmpdir)
    base = Path(os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir())
    return (base / f"pytest-of-{getpass.getuser()}").resolve()


def left_by_tests(lab: dict, root: Path) -> bool:
    src = lab["source"]
    return not lab["source_exists"] or (src is not None and Path(src).resolve().is_relative_to(root))


def main(argv: list[str]) -> int:
    only = set(argv)  # bridges to consider (a test sweeps only its own lab); none: every lab
    root = pytest_root()
    for lab in lifecycle.labs():
        if only and lab["bridge"] not in only:
            continue
        if left_by_tests(lab, root):
            print(f"stale test lab on bridge {lab['bridge']} ({lab['running']} of {lab['nodes']} nodes running, "
                  f"environment {lab['source']}): taking it down", file=sys.stderr)
            lifecycle.down_bridge(lab["bridge"], say=lambda m: print(f"  {m}", file=sys.stderr))
        elif lab["running"]:
            print(f"note: lab {lab['environment']} on bridge {lab['bridge']} is up ({lab['running']} nodes, "
                  f"{lab['source']}); it shares root's inotify instances with the tests' labs "
                  f"({hostlimits.in_use()} of {hostlimits.limit()} in use)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
