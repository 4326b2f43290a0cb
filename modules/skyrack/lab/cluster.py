"""The lab's control-plane outputs, once its API servers answer, and the lab cluster's nodes.

The Azure stack exports the control plane's outputs; the lab's stand-in stack (stacks/lab,
skyrack.lab.stacks) exports the same contract (`apiserver_endpoint`, `ca_cert_pem`,
`ca_cert_hash`, `bootstrap_token`, `admin_kubeconfig`, ...) from the lab's PKI (`outputs`).
From it, as in Azure (`pulumi stack output --json --show-secrets`):

* `outputs.json`, so `skyrack join configs/lab.yaml --outputs <it>` runs the real `kubeadm join`;
* `admin.conf`, the admin kubeconfig (`skyrack lab kubeconfig` prints its path).

Both are secret and live in the lab's root-only state directory (0600). The cluster layer
is applied by the real `pulumi up` of stacks/cluster (`skyrack lab pulumi --env <env> up`).
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from pathlib import Path

from .. import build
from ..kube import health, readiness
from ..plan import Plan
from ..render.kubeconfig import kubeconfig
from . import controlplane, ssh, stacks
from .state import Paths

READY_TIMEOUT = 300


class ClusterError(RuntimeError):
    """The lab's API servers did not come up, or the cluster layer could not be applied."""


def outputs_path(paths: Paths) -> Path:
    return controlplane.home(paths) / "outputs.json"


def kubeconfig_path(paths: Paths) -> Path:
    return controlplane.home(paths) / "admin.conf"


def outputs(plan: Plan, paths: Paths) -> dict:
    """The control plane's outputs, as the Azure stack exports them (secrets in the clear: keep it 0600)."""
    pp = controlplane.ensure_pki(plan, paths)
    ca, admin = pp.cas["kubernetes"], pp.certs["admin"]
    return {
        "apiserver_endpoint": plan.apiserver_endpoint,
        "ca_cert_pem": ca.cert_pem,
        "ca_cert_hash": pp.ca_cert_hash,
        "bootstrap_token": pp.bootstrap_token,
        "admin_kubeconfig": kubeconfig(plan.env.name, plan.apiserver_endpoint, ca.cert_pem, admin.cert_pem,
                                       admin.key_pem),
        "etcd_endpoints": [f"https://{m.ip}:2379" for m in plan.members_of("etcd")],
    }


def kubectl(artifacts: build.Artifacts, paths: Paths, *args: str, stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(artifacts.binaries.path("kubectl")), f"--kubeconfig={kubeconfig_path(paths)}", *args],
                          input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


def converge(plan: Plan, env_path: Path, paths: Paths, artifacts: build.Artifacts, say=print) -> None:
    """API servers ready, the stand-in control-plane stack up, the join's outputs and kubeconfig written
    from it (idempotent). The cluster layer is the Pulumi program's: `skyrack lab pulumi --env <env> up`."""
    out = outputs(plan, paths)
    try:
        readiness.wait_for_apiserver(out["apiserver_endpoint"], out["ca_cert_pem"], out["admin_kubeconfig"],
                                     timeout_s=READY_TIMEOUT, interval_s=3, log=lambda _m: None)
    except readiness.NotReady as exc:
        raise ClusterError(f"{exc}; the API server's boot log: ssh -F {paths.ssh_config} "
                           f"{plan.members_of('apiserver')[0].name} cat /var/log/cloud-init-output.log") from None
    try:  # the API server answers: its controller manager leads too (the scheduler, once the layer is applied)
        wait_ready(plan, paths, READY_TIMEOUT, health.CONTROL_PLANE, say)
    except health.NotReady as exc:
        raise ClusterError(f"{exc}; the API server's static pods: ssh -F {paths.ssh_config} "
                           f"{plan.members_of('apiserver')[0].name} crictl ps -a") from None
    ws = stacks.workspace(paths, artifacts.engine)
    stacks.controlplane_up(ws, env_path, plan.env.name)
    stacks.write_outputs(ws, env_path, plan.env.name, outputs_path(paths), kubeconfig_path(paths))
    say(f"control-plane stack {plan.env.name} up (pulumi, state in {ws.backend}); the cluster layer: "
        f"skyrack lab pulumi --env {env_path} up")


def member_ready(plan: Plan, paths: Paths, ip: str) -> None:
    """One API server answers /readyz itself (its own address, not the load balancer's: the member that was
    just replaced, before the next one is touched). ClusterError after READY_TIMEOUT."""
    out = outputs(plan, paths)
    try:
        readiness.wait_for_apiserver(f"https://{ip}:{urllib.parse.urlsplit(plan.apiserver_endpoint).port}", out["ca_cert_pem"],
                                     out["admin_kubeconfig"], timeout_s=READY_TIMEOUT, interval_s=3,
                                     log=lambda _m: None)
    except readiness.NotReady as exc:
        raise ClusterError(str(exc)) from None


def node_status(plan: Plan, paths: Paths, artifacts: build.Artifacts) -> list[dict]:
    """Every node the API server knows: Ready or not, its team/rack labels and taints, kubelet's and the
    container runtime's versions."""
    proc = kubectl(artifacts, paths, "get", "nodes", "-o", "json")
    if proc.returncode != 0:
        raise ClusterError(f"kubectl get nodes failed: {proc.stderr.strip()}")
    out = []
    for item in json.loads(proc.stdout)["items"]:
        ready = next((c["status"] == "True" for c in item["status"].get("conditions", []) if c["type"] == "Ready"),
                     False)
        labels = item["metadata"].get("labels", {})
        out.append({"name": item["metadata"]["name"], "ready": ready,
                    "labels": {k: v for k, v in labels.items() if k.startswith("skyrack.io/")},
                    "taints": [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in item["spec"].get("taints", [])],
                    "version": item["status"].get("nodeInfo", {}).get("kubeletVersion"),
                    "runtime": item["status"].get("nodeInfo", {}).get("containerRuntimeVersion")})
    return out


def wait_nodes(plan: Plan, paths: Paths, artifacts: build.Artifacts, timeout: float, say=print) -> list[dict]:
    """Wait until every planned worker is registered and Ready; ClusterError naming the ones that are not."""
    import time

    deadline = time.monotonic() + timeout
    wanted = {n.name for n in plan.nodes}
    while True:
        nodes = node_status(plan, paths, artifacts)
        missing = sorted(wanted - {n["name"] for n in nodes if n["ready"]})
        if not missing:
            return nodes
        if time.monotonic() > deadline:
            raise ClusterError(f"not Ready after {timeout:.0f} s: {', '.join(missing)} "
                               f"(kubectl --kubeconfig {kubeconfig_path(paths)} describe node <name>)")
        time.sleep(3)


def probe(plan: Plan, paths: Paths, stage: str = health.CLUSTER) -> list[health.Check]:
    """The cluster's readiness checks (skyrack.kube.health) against the lab: the API as the lab's admin,
    the DNS query from every Ready planned node over the lab's SSH (host keys checked)."""
    out = outputs(plan, paths)

    def run_on(host: str, argv) -> tuple[int, str]:
        import shlex

        try:
            proc = ssh.run(paths, host, shlex.join(argv), timeout=20)
        except subprocess.TimeoutExpired:
            return 124, "no answer (ssh timed out)"
        return proc.returncode, proc.stdout + proc.stderr

    with readiness.api(out["apiserver_endpoint"], out["ca_cert_pem"], out["admin_kubeconfig"]) as get:
        return health.checks(plan, get, run_on, stage)


def wait_ready(plan: Plan, paths: Paths, timeout: float, stage: str = health.CLUSTER,
               say=print) -> list[health.Check]:
    """Wait until the cluster is ready (the stage's checks); health.NotReady naming what is not."""
    return health.wait(lambda: probe(plan, paths, stage), timeout, say=say)
