"""Kubernetes' own conformance suite against a cluster (issue #26): the measure nobody here wrote.

`run()` starts upstream's `e2e.test` (skyrack.build.conformance) with its own flags: the skeleton provider
(no cloud), the cluster's kubeconfig, the cluster's kubectl, a focus and a skip, a JUnit report; with
`procs` > 1 through upstream's `ginkgo` CLI, which runs the `[Serial]` tests alone after the others, as
upstream's conformance image does. `Result` is read from the JUnit report: passed, failed, skipped, and each
failure with its first error line.

Before anything runs, `preflight()` asks the API server's `/readyz` through the same kubeconfig, so a cluster
that is down is one clear error within seconds, not a suite that waits out its timeouts.

skyrack's rack nodes carry their team's taint (skyrack.kube.batch), which upstream's test pods do not
tolerate; the suite needs nodes that any pod may use. And skyrack's team policies (skyrack.kube.isolation)
deny what a team's pod may not do and the suite's tests do on purpose: tolerate every taint, name their own
priority classes. `suite_access()` opens both for the run and puts back exactly what it changed, even when the
run fails: the team taint off the chosen nodes, and the policies' bindings told to pass over the namespaces the
suite makes (upstream's e2e framework labels each `e2e-run`; a namespace is cluster-scoped, so only a cluster
administrator, as the suite is, can make one so labelled).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..build.cache import Say
from ..kube import isolation
from ..plan import TEAM_TAINT_KEY as TEAM_TAINT

# upstream's focus for the conformance suite, and what it never runs against a shared cluster
FOCUS = r"\[Conformance\]"
SKIP = r"\[Disruptive\]|\[Flaky\]"
NON_BLOCKING_TAINTS = ("node-role.kubernetes.io/control-plane", TEAM_TAINT)
PREFLIGHT_SECONDS = 30
SUITE_TEXT = "Kubernetes e2e suite"  # test/e2e's RunSpecs description: the start of every test's full text
SUITE_NAMESPACE_LABEL = "e2e-run"  # test/e2e/framework: CreateTestingNS labels every namespace it makes
SUITE_NODES = ("[SynchronizedBeforeSuite]", "[SynchronizedAfterSuite]", "[BeforeSuite]", "[AfterSuite]",
               "[ReportBeforeSuite]", "[ReportAfterSuite]", "[DeferCleanup (Suite)]")

# A representative part, minutes long (what the lab's test runs; `bench/conformance.py --subset`): DNS,
# Services across nodes, pod-to-pod across racks, exec and logs through the kubelet, environment variables
# named as Kubernetes allows and a shell does not (read by the busybox image's shell), authorization, an
# admission webhook the API server calls in a pod, the scheduler's preemption.
SUBSET = (
    "[sig-network] DNS should provide DNS for services [Conformance]",
    "[sig-network] DNS should provide DNS for the cluster [Conformance]",
    "[sig-network] Services should serve a basic endpoint from pods [Conformance]",
    "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http "
    "[Conformance] [NodeConformance]",
    "[sig-node] Pods should support remote command execution over websockets [Conformance] [NodeConformance]",
    "[sig-cli] Kubectl logs logs should be able to retrieve and filter logs [Conformance]",
    "[sig-node] ConfigMap should be consumable as environment variable names with various prefixes [Conformance]",
    "[sig-auth] SubjectReview should support SubjectReview API operations [Conformance]",
    "[sig-auth] ServiceAccounts should mount an API token into pods [Conformance]",
    "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should be able to deny pod and configmap "
    "creation [Conformance]",
    "[sig-scheduling] SchedulerPreemption validates basic preemption works [Conformance] [Serial]",
)


def exactly(names: Sequence[str]) -> str:
    """A focus that matches exactly these tests: Ginkgo matches it, anywhere, against the suite's description
    (e2e's RunSpecs) followed by the test's name."""
    return f"^{re.escape(SUITE_TEXT)} (" + "|".join(re.escape(n) for n in names) + ")$"


class ConformanceError(RuntimeError):
    """The suite could not run (the cluster does not answer, a binary is missing): one line, no traceback."""


@dataclass
class Result:
    passed: int
    failed: int
    skipped: int  # selected by the focus but skipped by the suite itself (its message says why)
    seconds: float
    junit: Path
    failures: list[tuple[str, str]] = field(default_factory=list)  # test name, its first error line
    skips: list[tuple[str, str]] = field(default_factory=list)  # test name, the suite's reason

    def summary(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped in {self.seconds / 60:.1f} min"

    def as_dict(self) -> dict:
        return {"passed": self.passed, "failed": self.failed, "skipped": self.skipped,
                "seconds": round(self.seconds, 1), "junit": str(self.junit),
                "failures": [{"test": t, "error": e} for t, e in self.failures],
                "skips": [{"test": t, "reason": r} for t, r in self.skips]}


def preflight(kubectl: Path, kubeconfig: Path, timeout: float = PREFLIGHT_SECONDS) -> None:
    """The API server answers `/readyz` through `kubeconfig`, or ConformanceError within `timeout` seconds."""
    if not kubeconfig.is_file():
        raise ConformanceError(f"{kubeconfig}: no such kubeconfig (is the lab up?)")
    cmd = [str(kubectl), f"--kubeconfig={kubeconfig}", f"--request-timeout={max(1, int(timeout) - 5)}s",
           "get", "--raw", "/readyz"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ConformanceError(f"{kubeconfig}: the API server did not answer /readyz within {timeout:.0f} s") from None
    if proc.returncode != 0 or proc.stdout.strip() != "ok":
        said = (proc.stderr.strip().splitlines() or [proc.stdout.strip()])[-1]
        raise ConformanceError(f"{kubeconfig}: the API server is not ready: {said}")


def _kubectl_json(kubectl: Path, kubeconfig: Path, *args: str) -> dict:
    proc = subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", *args, "-o", "json"], capture_output=True,
                          text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise ConformanceError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return json.loads(proc.stdout) if proc.stdout.strip() else {}  # --ignore-not-found: nothing


def _patch(kubectl: Path, kubeconfig: Path, kind: str, name: str, ops: list[dict]) -> None:
    proc = subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", "patch", kind, name, "--type=json",
                           "-p", json.dumps(ops)], capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise ConformanceError(f"{kind} {name}: patching it failed: {proc.stderr.strip()}")


def _set_taints(kubectl: Path, kubeconfig: Path, node: str, taints: list[dict]) -> None:
    _patch(kubectl, kubeconfig, "node", node, [{"op": "replace", "path": "/spec/taints", "value": taints}])


SELECTOR = "/spec/matchResources/namespaceSelector/matchExpressions"
BINDINGS = (isolation.TOLERATIONS_POLICY, isolation.PRIORITIES_POLICY)  # each policy's binding has its name


@contextlib.contextmanager
def suite_access(kubectl: Path, kubeconfig: Path, nodes: Sequence[str], say: Say = print) -> Iterator[None]:
    """For the block: skyrack's team taint off `nodes` and its team policies passing over the suite's
    namespaces; afterwards each node's taints and each binding's namespace selector exactly as they were."""
    taints: dict[str, list[dict]] = {}
    selectors: dict[str, list[dict]] = {}
    kind = "validatingadmissionpolicybinding"
    try:
        for node in nodes:
            had = _kubectl_json(kubectl, kubeconfig, "get", "node", node)["spec"].get("taints") or []
            if any(t["key"] == TEAM_TAINT for t in had):
                taints[node] = had
                _set_taints(kubectl, kubeconfig, node, [t for t in had if t["key"] != TEAM_TAINT])
        if taints:
            say(f"team taint lifted for the suite on {', '.join(taints)}")
        for name in BINDINGS:
            found = _kubectl_json(kubectl, kubeconfig, "get", kind, "--ignore-not-found", name)
            expressions = (((found.get("spec") or {}).get("matchResources") or {}).get("namespaceSelector")
                           or {}).get("matchExpressions")
            if expressions is None:  # not installed (or not selecting by namespace): nothing to open
                continue
            selectors[name] = expressions
            _patch(kubectl, kubeconfig, kind, name, [{"op": "add", "path": SELECTOR + "/-", "value": {
                "key": SUITE_NAMESPACE_LABEL, "operator": "DoesNotExist"}}])
        if selectors:
            say(f"team policies ({', '.join(selectors)}) pass over the suite's namespaces (label "
                f"{SUITE_NAMESPACE_LABEL}) for the run")
        yield
    finally:
        for node, had in taints.items():
            _set_taints(kubectl, kubeconfig, node, had)
        for name, expressions in selectors.items():
            _patch(kubectl, kubeconfig, kind, name, [{"op": "replace", "path": SELECTOR, "value": expressions}])
        if taints or selectors:
            say("team taint and team policies restored")


def command(suite_dir: Path, kubeconfig: Path, kubectl: Path, report_dir: Path, focus: str, skip: str,
            procs: int, timeout_min: int) -> list[str]:
    """The e2e.test command line (through ginkgo when `procs` > 1); its JUnit report is report_dir/junit.xml."""
    e2e = [f"--kubeconfig={kubeconfig}", "--provider=skeleton", f"--kubectl-path={kubectl}",
           f"--non-blocking-taints={','.join(NON_BLOCKING_TAINTS)}", "--disable-log-dump",
           f"--report-dir={report_dir}"]
    if procs <= 1:
        return [str(suite_dir / "bin/e2e.test"), f"--ginkgo.focus={focus}", f"--ginkgo.skip={skip}",
                f"--ginkgo.junit-report={report_dir / 'junit.xml'}", "--ginkgo.no-color",
                f"--ginkgo.timeout={timeout_min}m", *e2e]
    return [str(suite_dir / "bin/ginkgo"), f"--procs={procs}", f"--focus={focus}", f"--skip={skip}",
            "--junit-report=junit.xml", f"--output-dir={report_dir}", "--no-color", f"--timeout={timeout_min}m",
            str(suite_dir / "bin/e2e.test"), "--", *e2e]


def first_line(text: str | None) -> str:
    """The first line that says something (Ginkgo prefixes a failure's message with `[FAILED]`); a Gomega
    message that starts with a bare `Expected` goes on to what was expected, on one line."""
    lines = [line.strip().removeprefix("[FAILED]").strip() for line in (text or "").splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return ""
    if lines[0] == "Expected" or lines[0].endswith(": Expected"):
        return " ".join(" ".join(lines[:8]).split())[:300]
    return lines[0][:300]


def read_junit(path: Path, seconds: float) -> Result:
    """Counts and failures from a JUnit report of the suite. Specs the focus left out are not counted: Ginkgo
    reports them skipped with no message of their own, the suite's own skips say why."""
    root = ET.parse(path).getroot()  # noqa: S314 - written by the e2e.test this run started
    r = Result(0, 0, 0, seconds, path)
    for case in root.iter("testcase"):
        name = case.get("name", "")
        if name.startswith(SUITE_NODES) and case.find("failure") is None and case.find("error") is None:
            continue
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            r.failed += 1
            r.failures.append((name, first_line(failure.get("message")) or first_line(failure.text)))
        elif skipped is not None:
            why = (skipped.get("message") or "").removeprefix("skipped").strip(" -:")
            if why:
                r.skipped += 1
                r.skips.append((name, why[:300]))
        elif case.get("status", "passed") == "passed":
            r.passed += 1
    return r


def run(suite_dir: Path, kubeconfig: Path, kubectl: Path, report_dir: Path, *, focus: str = FOCUS,
        skip: str = SKIP, procs: int = 1, timeout_min: int = 240, say: Say = print, label: str = "") -> Result:
    """Run the suite (after `preflight`), its output in report_dir/e2e.log; the result from its JUnit report.
    `label` names the selection in what is printed (the focus and skip themselves otherwise)."""
    preflight(kubectl, kubeconfig)
    report_dir.mkdir(parents=True, exist_ok=True)
    junit = report_dir / "junit.xml"
    junit.unlink(missing_ok=True)
    cmd = command(suite_dir, kubeconfig, kubectl, report_dir, focus, skip, procs, timeout_min)
    log = report_dir / "e2e.log"
    say(f"running e2e.test ({label or f'focus {focus!r}, skip {skip!r}'}, {procs} process{'es' if procs > 1 else ''}); "
        f"its output: {log}")
    started = time.monotonic()
    with log.open("w") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        try:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=report_dir,
                                  timeout=timeout_min * 60 + 300, check=False)
        except subprocess.TimeoutExpired:
            raise ConformanceError(f"e2e.test did not finish within {timeout_min} min; its output: {log}") from None
    seconds = time.monotonic() - started
    if not junit.is_file():
        raise ConformanceError(f"e2e.test exited {proc.returncode} and wrote no JUnit report; its output: {log}")
    return read_junit(junit, seconds)


@dataclass(frozen=True)
class Target:
    """What a run needs: the suite, the cluster's kubeconfig and kubectl, the nodes whose team taint it lifts."""

    suite: Path
    kubeconfig: Path
    kubectl: Path
    nodes: tuple[str, ...]
    unbuilt: dict[str, str]  # images the suite lists that this machine does not build, with the reason


def prepare_lab(env_path: Path, say: Say = print, *, whole: bool = False) -> Target:
    """The suite for the lab's Kubernetes (built once, cached) and its images pushed into the lab's registry
    under upstream's names, where every node pulls them; with `whole` False only the ones the subset needs
    (what ./dev test builds). The lab must be up (`preflight` says so if not)."""
    from ..build import BuildError
    from ..build import conformance as suite_build
    from . import cluster, lifecycle, site

    try:
        lab = lifecycle.open_lab(env_path)
        arts = lifecycle.artifacts(lab)
    except lifecycle.LabError as exc:
        raise ConformanceError(str(exc)) from None
    kubeconfig, kubectl = cluster.kubeconfig_path(lab.paths), arts.binaries.path("kubectl")
    preflight(kubectl, kubeconfig)
    try:
        suite_dir = suite_build.suite(arts.build, say)
        layout = suite_build.suite_images(arts.build, arts.binaries, lab.cfg.suite, suite_dir, say)
        site.push_images(lab.paths, lab.site, layout, suite_build.image_refs(suite_dir))
        if whole:
            layout = suite_build.whole_suite_images(arts.build, arts.binaries, lab.cfg.suite, suite_dir, arts.oci_layout, say)
            site.push_images(lab.paths, lab.site, layout, suite_build.whole_suite_refs(suite_dir, arts.build))
    except (BuildError, site.SiteError, lifecycle.LabError) as exc:
        raise ConformanceError(str(exc)) from None
    return Target(suite_dir, kubeconfig, kubectl, tuple(n.name for n in lab.plan.nodes),
                  suite_build.unbuilt(suite_dir, arts.build, whole=whole))
