"""Benchmark: building the lab's Kubernetes from source (skyrack.build), cold and warm.

    .venv/bin/python bench/k8s_build.py            # warm: what a second `lab up` pays (the cache is used)
    .venv/bin/python bench/k8s_build.py --cold     # cold: an empty cache root (Go modules, compile, packages, images)

Cold runs in a fresh process with SKYRACK_CACHE pointing at a new directory, so nothing
(neither the Go build cache nor the module cache) is shared with the machine's cache; it
takes tens of minutes on 2 cores. Prints each component's time and size, and the total.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "modules"))
from skyrack import upstream  # noqa: E402  (after the path above)

SNIPPET = """
import json, sys, time
from skyrack import build, upstream
t = time.monotonic()
a = build.ensure(upstream.KUBERNETES_BUILDS[sys.argv[1]], "bookworm", say=lambda m: print(m, file=sys.stderr, flush=True))
print(json.dumps({"seconds": round(time.monotonic() - t, 1), "cache": build.report()}))
"""


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def run(version: str, cache: Path | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "modules")}
    if cache is not None:
        env["SKYRACK_CACHE"] = str(cache)
    proc = subprocess.run([sys.executable, "-c", SNIPPET, version], env=env, capture_output=False,
                          stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default=max(upstream.KUBERNETES_BUILDS, key=lambda v: tuple(map(int, v.split(".")))))
    ap.add_argument("--cold", action="store_true", help="build into an empty cache root (tens of minutes)")
    ap.add_argument("--keep", action="store_true", help="keep the cold cache root afterwards")
    args = ap.parse_args()
    if args.cold:
        root = Path(tempfile.mkdtemp(prefix="skyrack-cold-cache-", dir="/var/tmp"))
        started = time.monotonic()
        cold = run(args.version, root)
        total = time.monotonic() - started
        print(f"cold build of Kubernetes {args.version}: {total / 60:.1f} min wall, cache root {root}")
        for e in cold["cache"]:
            print(f"  {e['component']:<18} {e['version']:<9} {e['built_in']:>8}  {e['mib']:>5} MiB")
        for sub in ("build", "go/mod", "go/build"):
            print(f"  {sub:<18} {du(root / sub) / 2**30:6.2f} GiB on disk")
        warm = run(args.version, root)
        print(f"warm (same cache, right after): {warm['seconds']:.1f} s")
        if not args.keep:
            subprocess.run(["rm", "-rf", str(root)], check=False)
    else:
        for attempt in (1, 2):
            warm = run(args.version, None)
            print(f"warm run {attempt}: {warm['seconds']:.1f} s (nothing rebuilt)")
        for e in warm["cache"]:
            print(f"  cached {e['component']:<18} {e['version']:<9} built in {e['built_in']:>8}, {e['mib']:>5} MiB")


if __name__ == "__main__":
    main()
