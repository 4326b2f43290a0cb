"""Benchmark: `./dev test` from scratch, as on a fresh machine: a clean clone, every cache empty.

    .venv/bin/python bench/fresh_test.py [--work /var/tmp/skyrack-fresh] [--cache DIR] [--keep]

Clones this checkout's HEAD into WORK/repo and runs `./dev test` there with
`SKYRACK_CACHE=WORK/cache` (builds, Go module and build caches, lab images, tools; `--cache DIR` names
another cache root, which must be empty or absent: on a fresh machine `--cache /var/cache/skyrack`
measures from scratch and leaves behind the caches CI and `./dev` use, and is never removed), Go's own
caches (for ./dev's `go install`) in WORK, pip's cache off and npm's cache in WORK/npm, so
nothing built or downloaded before is reused; only the Debian packages and the Go toolchain
already on the machine are. `CI=true`, as in CI.

Prints each phase of `./dev test` (its `==>` lines) with the minute it started, each built
component's time (the build cache's history), pytest's summaries, the slowest test steps and the total; the budget is
85 minutes. The full log is WORK/test.log. Run it on a quiet machine: every lab test and build
shares the same 2 cores. WORK (~10 GiB) is removed after a passing run unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from skyrack.lab.lifecycle import MIN_FREE_SHARE

ROOT = Path(__file__).resolve().parents[1]
BUDGET_MINUTES = 85
# What WORK grows to (the clone, a second copy of every cache, the lab's images): about 20 GiB on 608b10b,
# 24 GiB on 17723b1 (the Go build cache alone 14 GiB).
WORK_GIB = 26
# What `lab up` asks on top, as it refuses to boot (skyrack.lab.lifecycle.check_disk): the share of the disk
# kubelets need free, and what the largest test lab's new hosts write (configs/lab.yaml's 9 hosts: 10 GiB).
# 2026-12-06 a run of 17723b1 passed the old check (WORK and the share only) and every lab test then failed
# at `lab up` for want of 3 GiB, after 47 minutes of build.
LAB_FREE_FRACTION = MIN_FREE_SHARE
LAB_HOSTS_GIB = 10
SUMMARY = re.compile(r"^=+ .*(passed|failed|error).* in [\d.]+s.*=+$")
DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown) +(\S+)$")  # pytest's --durations lines (pyproject.toml)
SLOWEST = 15


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/skyrack-fresh"))
    ap.add_argument("--cache", type=Path, help="the cache root to build into, empty or absent (default WORK/cache)")
    ap.add_argument("--keep", action="store_true", help="keep WORK (the clone, its caches and the log)")
    args = ap.parse_args()
    work: Path = args.work
    cache: Path = args.cache.resolve() if args.cache else work / "cache"
    if args.cache and cache.exists() and any(cache.iterdir()):
        print(f"fresh_test: --cache {cache} is not empty: a run into it would not be from scratch. Move it aside "
              f"(or remove it) first.", file=sys.stderr)
        return 2
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    # WORK is a second copy of everything /var/cache/skyrack holds: on a disk that fits one, the lab tests
    # would all fail at `lab up` (too little free space) long after the build. Say so before starting.
    disk = shutil.disk_usage(work)
    need = (WORK_GIB + LAB_HOSTS_GIB) * 2**30 + LAB_FREE_FRACTION * disk.total
    if disk.free < need:
        print(f"fresh_test: {work} has {disk.free / 2**30:.0f} GiB free; a from-scratch run needs about "
              f"{need / 2**30:.0f} GiB ({WORK_GIB} GiB for WORK, {LAB_HOSTS_GIB} GiB for the lab's hosts, and the "
              f"lab wants {LAB_FREE_FRACTION:.0%} of the disk free). Free space first (another run's WORK, or move "
              f"/var/cache/skyrack aside) or give --work on a larger disk.", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
        return 2
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(work / "repo")], check=True)
    env = {**os.environ, "SKYRACK_CACHE": str(cache), "PIP_NO_CACHE_DIR": "1",
           "npm_config_cache": str(work / "npm"), "CI": "true",
           # skyrack's own builds set these from SKYRACK_CACHE; ./dev's `go install` of actionlint uses them
           "GOCACHE": str(work / "go-build"), "GOMODCACHE": str(work / "go-mod"), "GOPATH": str(work / "go-path")}
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "SKYRACK_TOOLS_CACHE", "SKYRACK_LAB_CACHE"):
        env.pop(k, None)
    print(f"from-scratch ./dev test of {head} in {work}, caches in {cache} (log {work / 'test.log'})", flush=True)
    started = time.monotonic()
    phases: list[tuple[float, str]] = []
    summaries: list[str] = []
    steps: list[tuple[float, str]] = []
    with open(work / "test.log", "w") as log:
        proc = subprocess.Popen(["./dev", "test"], cwd=work / "repo", env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            plain = re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
            if plain.startswith("==> "):
                phases.append((time.monotonic() - started, plain[4:]))
                print(f"  {phases[-1][0] / 60:5.1f} min  {plain[4:]}", flush=True)
            elif m := DURATION.match(plain):
                steps.append((float(m[1]), f"{m[2]:8} {m[3]}"))
            elif SUMMARY.match(plain):
                summaries.append(plain.strip("= "))
                print(f"  {(time.monotonic() - started) / 60:5.1f} min  pytest: {summaries[-1]}", flush=True)
        rc = proc.wait()
    total = time.monotonic() - started
    hist = cache / "build" / "history.json"
    builds = json.loads(hist.read_text()) if hist.exists() else {}
    print("\nbuilt from scratch (seconds, while the other tests ran):")
    for name, secs in sorted(builds.items(), key=lambda kv: -kv[1]):
        print(f"  {name:28} {secs:7.1f}")
    print(f"  {'all builds':28} {sum(builds.values()):7.1f}")
    # the log goes with WORK after a passing run: the slowest test steps are kept here, where the next cut is
    print(f"\nthe {SLOWEST} slowest test steps (seconds, of every pytest run's --durations):")
    for secs, what in sorted(steps, reverse=True)[:SLOWEST]:
        print(f"  {secs:7.1f}  {what}")
    # a failed run says nothing about the budget: the tests after the failure may not have run at all
    verdict = ("FAILED: not a measure of" if rc != 0 else
               "within" if total <= BUDGET_MINUTES * 60 else "OVER")
    print(f"\n./dev test from scratch: exit {rc}, {total / 60:.1f} min ({verdict} the {BUDGET_MINUTES}-minute budget)")
    if rc == 0 and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    elif rc != 0:
        print(f"kept {work} for its log")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
