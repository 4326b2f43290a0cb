"""Benchmark: `skyrack diff` on prod (7,680 nodes), beside the commands it is made of.

A temporary git repository holds this checkout's code (modules/, ansible/, stacks/) and
configs/prod.yaml with its lock and stack settings at one commit; the working tree then
carries a change and `skyrack diff HEAD` compares the two, run by the repository's own
code as CI runs it (the working tree derives in-process; a base whose code differs is
derived in a subprocess over a copy of it). Each figure is one fresh process (CLI
start-up included), best of N runs, in wall-clock seconds and in CPU seconds (the process
and its derivation subprocesses; what other load on the machine does not inflate):

* skyrack diff:          the change below, text output (markdown within a few ms of it)
* skyrack plan --locked: one plan of prod (diff plans both sides: about twice this)
* git diff:              git's own textual diff of the same change (what a reviewer
                         would otherwise read)

Changes: one node added; a rack of 64 added; every node re-addressed (7,680 nodes
concerned: the worst case for matching nodes and rendering); a template changed and the
IPAM code changed (code changes: each revision derived by its own code, one of them in a
subprocess).

Usage: python bench/gitops_diff.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "modules"), "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.org",
       "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.org", "GIT_CONFIG_GLOBAL": os.devnull}


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, check=False)


def best(cmd: list[str], cwd: Path, repeat: int) -> tuple[float, float, str]:
    """Best wall-clock seconds, best CPU seconds (user + system, the derivation subprocesses included:
    the figure other load on the machine does not inflate), first line of output."""
    times, cpus, out = [], [], ""
    for _ in range(repeat):
        t, r = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = run(cmd, cwd)
        times.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - r.ru_utime + after.ru_stime - r.ru_stime)
        out = proc.stdout.splitlines()[0] if proc.stdout else proc.stderr.strip()[:80]
    return min(times), min(cpus), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sky = [sys.executable, "-m", "skyrack"]
    ipam, unit = "modules/skyrack/ipam.py", "modules/skyrack/templates/cloud-init/etcd.service.j2"
    code_changes = {
        "a template changed": (unit, lambda t: t.replace("LimitNOFILE=65536", "LimitNOFILE=131072")),
        "the IPAM code changed": (ipam, lambda t: t.replace('("apiservers", 28)', '("apiservers", 27)')),
    }
    changes = {
        "one node added": lambda t: t.replace("{count: 64, first_ip: 10.64.119.10}",
                                              "{count: 65, first_ip: 10.64.119.10}"),
        "a rack of 64 added": lambda t: t.replace("\ncluster:", "\n  - {name: r121, team: rl, gpu: {model: H100-SXM5-80GB, "
                                                  "count: 8}, node_range: {count: 64, first_ip: 10.64.120.10}}"
                                                  "\ncluster:", 1),  # racks: is followed by cluster:
        "every node re-addressed": lambda t: re.sub(r"first_ip: 10\.64\.(\d+)\.10", r"first_ip: 10.64.\1.100", t),
    }
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        listing = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "modules",
                       "ansible", "stacks", "Pulumi.yaml"], ROOT).stdout
        for rel in [p for p in listing.split("\0") if p and (ROOT / p).is_file()] + \
                [f"configs/{n}" for n in ("prod.yaml", "prod.lock.yaml", "Pulumi.prod.yaml")]:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, repo / rel)
        ENV["PYTHONPATH"] = str(repo / "modules")  # the repository's own code, as in CI
        run(["git", "init", "-q"], repo)
        run(["git", "add", "-A"], repo)
        run(["git", "commit", "-qm", "base"], repo)
        original = (repo / "configs/prod.yaml").read_text()
        print(f"{'change':<26} {'command':<24} {'best s':>7} {'cpu s':>6}  first line of output")
        cases = [(label, "configs/prod.yaml", edit) for label, edit in changes.items()]
        cases += [(label, path, edit) for label, (path, edit) in code_changes.items()]
        for label, path, edit in cases:
            (repo / path).write_text(edit((repo / path).read_text()))
            run([*sky, "plan", "configs/prod.yaml"], repo)  # the PR would carry the updated lock
            for name, cmd in (("skyrack diff", [*sky, "diff", "HEAD"]),
                              ("skyrack plan --locked", [*sky, "plan", "--locked", "configs/prod.yaml"]),
                              ("git diff", ["git", "diff", "--stat", "HEAD"])):
                seconds, cpu, first = best(cmd, repo, args.repeat)
                print(f"{label:<26} {name:<24} {seconds:>7.2f} {cpu:>6.2f}  {first[:90]}")
            run(["git", "checkout", "-q", "--", "."], repo)
        assert (repo / "configs/prod.yaml").read_text() == original


if __name__ == "__main__":
    main()
