"""How long the cluster layer takes to render, per environment: the pure manifests next to the
whole Pulumi program under mocks (what `pulumi preview` spends in Python), and schema validation.

Run: PYTHONPATH=modules .venv/bin/python bench/kube_render.py
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "modules"), str(ROOT / "tests")]

import kubernetes_validate  # noqa: E402

from kube.conftest import NOW, control_plane_outputs, make_ca, run_program, unwrap  # noqa: E402
from skyrack import plan as planmod  # noqa: E402
from skyrack.kube.cli import placeholder_manifests  # noqa: E402
from skyrack.kube.layer import ClusterLayer  # noqa: E402


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ca = make_ca()
    print(f"{'env':6} {'objects':>8} {'plan':>8} {'pure':>8} {'mocked':>8} {'validate':>9}   (seconds, best of 3)")
    for env in ("lab", "dev", "prod"):
        t_plan, p = timed(lambda env=env: planmod.make(ROOT / "configs" / f"{env}.yaml"))
        t_pure, _ = timed(lambda p=p: placeholder_manifests(p, dt.datetime.now(dt.UTC)))
        cp = control_plane_outputs(p, ca)
        t_mock, res = timed(lambda p=p, cp=cp, env=env: run_program(
            env, lambda: ClusterLayer("c", p, cp, now=NOW, wait_timeout_s=None)))
        objs = [unwrap(r.inputs) for r in res if r.typ.startswith("kubernetes:")]
        t_val, _ = timed(lambda objs=objs, p=p: [kubernetes_validate.validate(o, p.env.kubernetes.version, strict=True)
                                                 for o in objs], repeat=1)
        print(f"{env:6} {len(objs):>8} {t_plan:>8.3f} {t_pure:>8.4f} {t_mock:>8.3f} {t_val:>9.3f}")


if __name__ == "__main__":
    main()
