"""The lab's control-plane outputs and its cluster layer, once its API servers answer.

The Azure stack exports the control plane's outputs (`pulumi stack output --json
--show-secrets > outputs.json`) and the cluster layer (`stacks/cluster`) creates the
objects a join needs. The lab's counterpart:

* `outputs.json` with the same contract (`apiserver_endpoint`, `ca_cert_pem`, `ca_cert_hash`,
  `bootstrap_token`, `admin_kubeconfig`, ...) from the lab's PKI, so `skyrack join
  configs/lab.yaml --outputs <it>` runs the real `kubeadm join`;
* `admin.conf`, the admin kubeconfig (`skyrack lab kubeconfig` prints its path);
* the cluster layer's objects, `skyrack.kube.concerns.all_manifests` — the same function the
  Pulumi program turns into resources — applied with `kubectl apply --server-side`.

All three are secret and live in the lab's root-only state directory (0600); nothing
secret passes through a command line or stdout: kubectl reads the manifests on stdin.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import yaml

from .. import build
from .. import outputs as contract
from ..files import write_private
from ..kube import bootstrap, concerns, readiness
from ..plan import Plan
from ..render.kubeconfig import kubeconfig
from . import controlplane
from .state import Paths

READY_TIMEOUT = 300
FIELD_MANAGER = "skyrack"


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


def write_outputs(plan: Plan, paths: Paths) -> dict:
    """outputs.json as the contract declares it (validated, 0600, atomic) and the admin kubeconfig (0600)."""
    data = outputs(plan, paths)
    contract.write_file(outputs_path(paths), data)
    write_private(kubeconfig_path(paths), data["admin_kubeconfig"])
    return data


def manifests(plan: Plan, out: dict, now: dt.datetime) -> list[dict]:
    """Every object of the cluster layer, Namespaces and CRDs first (what `pulumi up` orders by dependency)."""
    token_id, token_secret = bootstrap.split_token(out["bootstrap_token"])
    groups = concerns.all_manifests(plan, endpoint=out["apiserver_endpoint"], ca_cert_pem=out["ca_cert_pem"],
                                    token_id=token_id, token_secret_part=token_secret, now=now)
    docs = [{k: v for k, v in m.items() if not k.startswith("_")} for ms in groups.values() for m in ms]
    first = {"Namespace": 0, "CustomResourceDefinition": 1}
    return sorted(docs, key=lambda m: first.get(m["kind"], 2))


def kubectl(artifacts: build.Artifacts, paths: Paths, *args: str, stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(artifacts.binaries.path("kubectl")), f"--kubeconfig={kubeconfig_path(paths)}", *args],
                          input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


def converge(plan: Plan, paths: Paths, artifacts: build.Artifacts, say=print,
             now: dt.datetime | None = None) -> None:
    """Outputs and kubeconfig written, API servers ready, the cluster layer applied (idempotent)."""
    out = write_outputs(plan, paths)
    try:
        readiness.wait_for_apiserver(out["apiserver_endpoint"], out["ca_cert_pem"], out["admin_kubeconfig"],
                                     timeout_s=READY_TIMEOUT, interval_s=3, log=lambda _m: None)
    except readiness.NotReady as exc:
        raise ClusterError(f"{exc}; the API server's boot log: ssh -F {paths.ssh_config} "
                           f"{plan.members_of('apiserver')[0].name} cat /var/log/cloud-init-output.log") from None
    docs = manifests(plan, out, now or dt.datetime.now(dt.UTC))
    proc = kubectl(artifacts, paths, "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
                   "-f", "-", stdin=yaml.safe_dump_all(docs, sort_keys=False))
    if proc.returncode != 0:
        raise ClusterError(f"applying the cluster layer failed: {proc.stderr.strip()}")
    say(f"cluster layer applied: {len(docs)} objects (kubectl apply --server-side)")


def node_status(plan: Plan, paths: Paths, artifacts: build.Artifacts) -> list[dict]:
    """Every node the API server knows: Ready or not, its team/rack labels and taints."""
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
                    "version": item["status"].get("nodeInfo", {}).get("kubeletVersion")})
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
