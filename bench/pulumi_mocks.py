"""How long the Azure program takes under Pulumi's mocks, next to the plan it starts from.

    PYTHONPATH=modules:tests/pulumi .venv/bin/python bench/pulumi_mocks.py

Prints, per shipped environment: on-prem nodes, the plan's time, the whole program's time
under mocks (plan, PKI with real keys, every resource) and the resources registered.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "modules"), str(ROOT / "tests" / "pulumi")]

from pulumi_harness import CONFIGS, run_stack  # noqa: E402

from skyrack import plan as planmod  # noqa: E402


def main() -> None:
    print(f"{'stack':<6} {'nodes':>6} {'plan s':>8} {'program s':>10} {'resources':>10} {'azure':>6}")
    for name in ("dev", "prod"):
        t0 = time.perf_counter()
        plan = planmod.make(CONFIGS / f"{name}.yaml")
        t1 = time.perf_counter()
        run = run_stack(name)
        t2 = time.perf_counter()
        azure = sum(1 for r in run.resources if r.typ.startswith("azure-native:"))
        print(f"{name:<6} {len(plan.nodes):>6} {t1 - t0:>8.2f} {t2 - t1:>10.2f} {len(run.resources):>10} {azure:>6}")


if __name__ == "__main__":
    main()
