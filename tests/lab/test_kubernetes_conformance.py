"""Kubernetes' own conformance suite judges the lab's cluster (issue #26): its representative part.

`bench/conformance.py --subset` as a person runs it (the suite built by `./dev test`'s `skyrack lab build
--conformance`, its images pushed into the lab's registry): DNS, Services across nodes, pod-to-pod across
racks, exec and logs through the kubelet, authorization, an admission webhook served from a pod, the
scheduler's preemption. Every test of the subset must run and pass (a focus that matched fewer would pass
by running less), and what the run opened for the suite (the racks' team taint, the team policies) must be
as it was afterwards. The whole suite is the bench, run by hand (docs/lab.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from skyrack.lab import conformance
from support import ROOT

from .test_kubernetes import kubectl

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def _opened(lab) -> dict:
    """What the run opens: every node's taints, each team policy binding's namespace selector."""
    nodes = json.loads(kubectl(lab, "get", "nodes", "-o", "json"))["items"]
    bindings = {name: json.loads(kubectl(lab, "get", "validatingadmissionpolicybinding", name, "-o", "json"))
                ["spec"]["matchResources"]["namespaceSelector"] for name in conformance.BINDINGS}
    return {"taints": {n["metadata"]["name"]: n["spec"].get("taints") or [] for n in nodes},
            "bindings": bindings}


def _bench(lab, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "conformance.py"), "--env", str(lab.env), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "modules")})


def test_the_subset_of_the_conformance_suite_passes_and_leaves_the_cluster_as_it_was(lab, tmp_path):
    lab.ready()
    before = _opened(lab)
    assert any(t["key"] == conformance.TEAM_TAINT for ts in before["taints"].values() for t in ts), before
    proc = _bench(lab, "--subset", "--procs", "2", "--json", "--report-dir", str(tmp_path / "report"),
                  "--timeout", "40", timeout=45 * 60)
    assert proc.stdout.startswith("{"), proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    log = (tmp_path / "report" / "e2e.log").read_text()[-3000:]
    assert result["failed"] == 0, json.dumps(result["failures"], indent=1) + "\n" + log
    assert result["passed"] == len(conformance.SUBSET), (result, log)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _opened(lab) == before


def test_a_cluster_that_does_not_answer_is_one_clear_error_within_a_minute(lab, tmp_path):
    target = conformance.prepare_lab(lab.env, say=lambda _m: None)  # built and pushed by the test above
    dead = tmp_path / "kubeconfig"  # an address on the lab's bridge where nobody answers (no credentials needed)
    dead.write_text("apiVersion: v1\nkind: Config\ncurrent-context: dead\n"
                    "clusters: [{name: dead, cluster: {server: 'https://198.18.1.254:6443'}}]\n"
                    "users: [{name: nobody, user: {}}]\n"
                    "contexts: [{name: dead, context: {cluster: dead, user: nobody}}]\n")
    started = time.monotonic()
    with pytest.raises(conformance.ConformanceError, match=r"did not answer|not ready") as exc:
        conformance.run(target.suite, dead, target.kubectl, tmp_path / "report")
    assert time.monotonic() - started < 60
    assert str(dead) in str(exc.value)
    assert not (tmp_path / "report" / "e2e.log").exists()  # nothing ran
