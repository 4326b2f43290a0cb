"""Benchmark: Kubernetes' own conformance suite against the lab cluster (issue #26).

    sudo .venv/bin/python bench/conformance.py [--env configs/lab.yaml] [--focus REGEX] [--skip REGEX]
                                               [--subset] [--procs 2] [--report-dir DIR]
                                               [--timeout MIN] [--json]

The lab must be up (`./dev lab`). Then:

1. **The suite at the cluster's release**: `e2e.test` and `ginkgo` built from the Kubernetes module (once,
   cached: skyrack.build.conformance), and the suite's images this machine builds pushed into the lab's
   registry under upstream's names (with --subset only the ones the subset needs, as ./dev test builds).
2. **Nodes any pod may use**: the racks' team taint is lifted for the run, and skyrack's team policies pass over
   the suite's namespaces (label `e2e-run`); both are restored after it, even when the run fails
   (skyrack.lab.conformance.suite_access: upstream's test pods tolerate no taint of skyrack's, and tolerate
   every taint or name their own priority classes where a team's pods may not).
3. **The run**: `ginkgo --procs N e2e.test -- --provider=skeleton ...` with upstream's conformance focus
   (`\\[Conformance\\]`, the `[Serial]` tests alone at the end) unless --focus says otherwise.

Prints `N passed, N failed, N skipped`, the wall time, every failure with its first error line, the suite's
own skips with their reason, and the images the suite lists that this machine does not build (a test that
needs one fails for that reason: see docs/lab.md). The JUnit report and the suite's output stay in
--report-dir. A lab that is down, or a kubeconfig that does not answer, is one error within a minute.
Figures in docs/lab.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "modules"))

from skyrack.errors import InputError  # noqa: E402
from skyrack.lab import conformance  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", type=Path, default=ROOT / "configs" / "lab.yaml", help="the lab environment (up)")
    ap.add_argument("--focus", default=conformance.FOCUS, help="the tests to run (a regular expression)")
    ap.add_argument("--skip", default=conformance.SKIP, help="tests not to run (a regular expression)")
    ap.add_argument("--subset", action="store_true",
                    help=f"only the representative part ({len(conformance.SUBSET)} tests: skyrack.lab.conformance.SUBSET)")
    ap.add_argument("--procs", type=int, default=2, help="parallel test processes (ginkgo --procs)")
    ap.add_argument("--report-dir", type=Path,
                    default=Path("/var/tmp/skyrack-conformance") / time.strftime("%Y%m%dT%H%M%S"))
    ap.add_argument("--timeout", type=int, default=360, help="minutes for the whole run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    say = (lambda m: print(m, file=sys.stderr)) if args.json else print
    label = f"focus {args.focus!r}, skip {args.skip!r}"
    if args.subset:
        args.focus, args.skip = conformance.exactly(conformance.SUBSET), "^$"
        label = f"the subset: {len(conformance.SUBSET)} tests"
    try:
        target = conformance.prepare_lab(args.env, say, whole=not args.subset)
        with conformance.suite_access(target.kubectl, target.kubeconfig, target.nodes, say):
            result = conformance.run(target.suite, target.kubeconfig, target.kubectl, args.report_dir,
                                     focus=args.focus, skip=args.skip, procs=args.procs, timeout_min=args.timeout,
                                     say=say, label=label)
    except conformance.ConformanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except InputError as exc:
        for p in exc.problems:
            print(f"error: {p}", file=sys.stderr)
        return 1
    if result.passed + result.failed == 0:
        print(f"error: the focus {args.focus!r} ran no test (JUnit report: {result.junit})", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**result.as_dict(), "focus": args.focus, "skip": args.skip, "procs": args.procs,
                          "unbuilt_images": target.unbuilt}, indent=1))
        return 0 if result.failed == 0 else 1
    print(f"\nconformance ({label}): {result.summary()}")
    for name, error in result.failures:
        print(f"  FAILED {name}\n         {error}")
    reasons: dict[str, int] = {}
    for _name, why in result.skips:
        reasons[why] = reasons.get(why, 0) + 1
    for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"  skipped by the suite ({n}): {why}")
    for ref, why in sorted(target.unbuilt.items()):
        print(f"  image not built here: {ref}: {why}")
    print(f"JUnit report: {result.junit}")
    return 0 if result.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
