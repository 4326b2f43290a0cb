"""kubeadm's certificates renewed before they expire, on a lab of its own whose certificates live 5 minutes.

`kubernetes.certificates` (validity 5 min, renewed 3 min ahead) goes into the API server's user-data
as kubeadm's `certificateValidityPeriod`, the controller manager's signing duration and the
skyrack-certs-renew timer; nothing else differs from production's. The test reads what kubeadm
reports on the API server, waits for the timer to renew every certificate and kubeconfig, then
waits past the moment the originals expired and shows the control plane still working with the
renewed ones: the controller manager and the scheduler lead and renew their leases, the kubelet
rotated its own client certificate (a CSR the controller manager approved and signed) and keeps its
node lease.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

import lab_variants as variants
from skyrack import plan as planmod
from skyrack.kube import health, readiness
from skyrack.lab import cluster
from skyrack.lab.state import Paths
from support import CONFIGS, need, run_cli

from .conftest import lab_missing

pytestmark = [pytest.mark.lab, pytest.mark.slow]
BRIDGE, OCTET = "skyrackt2", 4
SHORT = {"validity_minutes": 5, "renew_before_minutes": 3}
KUBELET_CERT = "/var/lib/kubelet/pki/kubelet-client-current.pem"


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory):
    reason = lab_missing()
    if reason:
        need(reason)
    env = variants.make(CONFIGS / "lab.yaml", tmp_path_factory.mktemp("certs"), BRIDGE, OCTET, etcd=1, racks=1,
                        apiservers=1, rack_nodes=1, execution=False, kubernetes_settings={"certificates": SHORT})
    proc = run_cli("lab", "up", str(env), timeout=1800)
    try:
        assert proc.returncode == 0, proc.stderr
        # Of the cluster layer, only what the kubelet's rotation needs: the binding that lets the controller
        # manager approve a node's renewal of its own client certificate (the layer's object, as
        # `skyrack kube manifests` prints it). One quick apply, done well before the first renewal restarts
        # the API server (the whole layer's `pulumi up` would run into that restart).
        docs = json.loads(run_cli("kube", "manifests", str(env), "--json", check=True).stdout)
        needed = [m for m in docs["Bootstrap"] if m["metadata"]["name"] == "kubeadm:node-autoapprove-certificate-rotation"]
        proc = run_cli("lab", "kubectl", "--env", str(env), "apply", "--server-side", "-f", "-",
                       input=json.dumps({"apiVersion": "v1", "kind": "List", "items": needed}))
        assert proc.returncode == 0, proc.stderr
        yield env, Paths.for_bridge(BRIDGE)
    finally:
        down = run_cli("lab", "down", str(env), timeout=300)
        assert down.returncode == 0, down.stderr


def _ssh(paths: Paths, command: str) -> str:
    from skyrack.lab import ssh

    proc = ssh.run(paths, "apiserver-0", command, timeout=60)
    assert proc.returncode == 0, f"{command}: {proc.stderr}"
    return proc.stdout


def expiries(paths: Paths) -> dict[str, dt.datetime]:
    """What kubeadm manages on the API server, and when each expires (kubeadm's own report)."""
    out = json.loads(_ssh(paths, "kubeadm certs check-expiration --config /etc/skyrack/kubeadm.yaml -o json"))
    return {c["name"]: dt.datetime.fromisoformat(c["expirationDate"].replace("Z", "+00:00"))
            for c in out["certificates"] if not c.get("externallyManaged")}


def kubectl(env, *args: str) -> str:
    proc = run_cli("lab", "kubectl", "--env", str(env), *args, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def wait_until(what: str, predicate, timeout: float, interval: float = 10):
    deadline = time.monotonic() + timeout
    while not (got := predicate()):
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(interval)
    return got


def test_kubeadms_certificates_are_renewed_and_the_control_plane_outlives_the_originals(short_lived):
    env, paths = short_lived
    p = planmod.make(env)
    first = expiries(paths)
    now = dt.datetime.now(dt.UTC)
    # what kubeadm made lives as long as the environment says (not kubeadm's year)
    assert {"admin.conf", "controller-manager.conf", "scheduler.conf", "apiserver-kubelet-client",
            "front-proxy-client"} <= set(first), first
    made_by_kubeadm = {k: v for k, v in first.items() if k != "apiserver"}  # apiserver.crt: the stack's
    assert all(v - now <= dt.timedelta(minutes=SHORT["validity_minutes"]) for v in made_by_kubeadm.values()), first

    # the timer renews all of them once the first is within 3 minutes of expiring, restarting each static pod
    def all_renewed() -> dict[str, dt.datetime] | None:
        now = expiries(paths)
        return now if all(now[k] > first[k] for k in made_by_kubeadm) else None

    renewed = wait_until("every certificate kubeadm made renewed by skyrack-certs-renew", all_renewed, timeout=8 * 60)
    # then it restarts the static pods, one at a time, and says what it renewed when it is done
    log = wait_until("the renewal's restarts done", lambda: (
        out if "renewed:" in (out := _ssh(paths, "journalctl -u skyrack-certs-renew.service --no-pager -o cat"))
        else None), timeout=6 * 60)
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert f"{component} restarted with the renewed certificates" in log, log
    assert all(renewed[k] - first[k] >= dt.timedelta(minutes=1) for k in made_by_kubeadm), (first, renewed)
    # the stack's serving certificate is renewed with the rest ("renew all"): nothing on the member expires
    assert renewed["apiserver"] > dt.datetime.now(dt.UTC), renewed

    # past the originals' expiry, the control plane runs on the renewed ones
    gone = max(made_by_kubeadm.values()) + dt.timedelta(seconds=30)
    time.sleep(max(0.0, (gone - dt.datetime.now(dt.UTC)).total_seconds()))
    def control_plane() -> list[health.Check]:
        out = cluster.outputs(p, paths)
        with readiness.api(out["apiserver_endpoint"], out["ca_cert_pem"], out["admin_kubeconfig"]) as get:
            return [health.check_apiserver(get), *(health.check_lease(get, name) for name in health.LEASES)]

    found = health.wait(control_plane, 180, say=lambda _m: None)
    assert [c.name for c in found] == ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]

    # the kubelet rotated its client certificate (a CSR of its own, approved through the cluster layer's binding
    # and signed for the same short duration) and keeps renewing its node lease with it
    csrs = json.loads(kubectl(env, "get", "csr", "-o", "json"))["items"]
    rotated = [c for c in csrs if c["spec"]["username"] == "system:node:apiserver-0"
               and c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
               and c.get("status", {}).get("certificate")]
    assert rotated, [(c["metadata"]["name"], c["spec"]["username"]) for c in csrs]
    renew = dt.datetime.fromisoformat(kubectl(env, "get", "lease", "-n", "kube-node-lease", "apiserver-0", "-o",
                                              "jsonpath={.spec.renewTime}").strip().replace("Z", "+00:00"))
    assert dt.datetime.now(dt.UTC) - renew < dt.timedelta(seconds=60), renew
