"""Benchmark: `pulumi up` of the cluster layer by the real engine on a lab cluster, beside the mock runtime.

A lab variant (bridge skyrackb0, 198.18.2.0/24, one etcd member, one worker: the layer's
objects need an API server, not workers) is brought up; then, on the lab's own Pulumi
workspace, the cluster layer (stacks/cluster, stack lab):

* create: `pulumi up` on a new stack (every object created);
* no-op: `pulumi up` again (nothing to change) and `pulumi preview`;
* one change: a team's CPU quota changed in the environment file, `pulumi up`;
* destroy: `pulumi destroy`.

In the same run, the same program under `pulumi.runtime.set_mocks` (what the unit tests
run: no engine, no cluster), best of 3.

    sudo .venv/bin/python bench/pulumi_lab.py [--json]

Needs root, the lab's tools and the build cache (`skyrack lab build`). ~6 minutes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "modules"), str(ROOT / "tests")]

import lab_variants as variants  # noqa: E402
from kube.conftest import NOW, control_plane_outputs, make_ca, run_program  # noqa: E402
from skyrack import plan as planmod  # noqa: E402
from skyrack.kube.layer import ClusterLayer  # noqa: E402
from skyrack.lab import lifecycle, stacks  # noqa: E402

BRIDGE, OCTET = "skyrackb0", 2


def timed(fn) -> tuple[float, object]:
    t = time.monotonic()
    out = fn()
    return round(time.monotonic() - t, 1), out


def mocked(env: Path) -> tuple[float, int]:
    p = planmod.make(env)
    cp = control_plane_outputs(p, make_ca())
    best, count = float("inf"), 0
    for _ in range(3):
        t = time.perf_counter()
        res = run_program("lab", lambda: ClusterLayer("c", p, cp, now=NOW, wait_timeout_s=None))
        best = min(best, time.perf_counter() - t)
        count = sum(1 for r in res if r.typ.startswith("kubernetes:"))
    return round(best, 2), count


def changed_quota(env: Path, dest: Path) -> Path:
    data = yaml.safe_load(env.read_text())
    team = next(iter(data["cluster"]["teams"]))
    data["cluster"]["teams"][team]["cpu"] = str(int(data["cluster"]["teams"][team]["cpu"]) + 1)
    dest.mkdir()
    shutil.copy(env.with_name("lab.lock.yaml"), dest / "lab.lock.yaml")
    (dest / "lab.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return dest / "lab.yaml"


def summary(out: str) -> dict:
    return json.loads(out)["changeSummary"]


def run(tmp: Path) -> dict:
    env = variants.make(ROOT / "configs/lab.yaml", tmp / "lab", BRIDGE, OCTET, rack_nodes=1, etcd=1, racks=1, execution=False)
    lifecycle.down(env, say=lambda _m: None)
    lifecycle.up(env, say=lambda _m: None)
    lab = lifecycle.open_lab(env)
    ws = stacks.workspace(lab.paths, lifecycle.artifacts(lab, kubernetes_provider=True).engine)
    stack = lab.plan.env.name

    def pulumi(*args: str, on: Path = env) -> str:
        return stacks.cluster(ws, lab.paths, on, stack, list(args))

    t_create, _ = timed(lambda: pulumi("up", "--yes", "--skip-preview"))
    t_noop, _ = timed(lambda: pulumi("up", "--yes", "--skip-preview"))
    t_preview, out = timed(lambda: pulumi("preview", "--json"))
    t_change, _ = timed(lambda: pulumi("up", "--yes", "--skip-preview", on=changed_quota(env, tmp / "changed")))
    t_destroy, _ = timed(lambda: pulumi("destroy", "--yes", "--skip-preview"))
    t_mock, objects = mocked(env)
    return {"objects": objects, "create_s": t_create, "noop_up_s": t_noop, "noop_preview_s": t_preview,
            "noop_preview": summary(out), "one_change_up_s": t_change, "destroy_s": t_destroy,
            "mocked_program_s": t_mock}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="skyrack-bench-") as d:
        try:
            r = run(Path(d))
        finally:
            lifecycle.down(variants.make(ROOT / "configs/lab.yaml", Path(d) / "down", BRIDGE, OCTET),
                           say=lambda _m: None)
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(f"cluster layer of the lab, {r['objects']} Kubernetes objects (seconds)")
    print(f"{'':28} {'real engine':>12} {'mocks':>8}")
    print(f"{'pulumi up, create':28} {r['create_s']:>12} {r['mocked_program_s']:>8}")
    print(f"{'pulumi up, nothing to do':28} {r['noop_up_s']:>12}")
    print(f"{'pulumi preview, no change':28} {r['noop_preview_s']:>12}   {r['noop_preview']}")
    print(f"{'pulumi up, one quota':28} {r['one_change_up_s']:>12}")
    print(f"{'pulumi destroy':28} {r['destroy_s']:>12}")


if __name__ == "__main__":
    main()
