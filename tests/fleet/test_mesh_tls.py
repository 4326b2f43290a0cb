"""The Receptor mesh is mutual TLS: the lab's controller (lab/mesh.py) and an execution node's own
configuration (its user-data, render/cloud_init.execution_node), run by the real receptor on loopback.

Only work the controller signed runs on an execution node. Only a node with a certificate of the mesh's
CA joins: not a node without TLS, not one with another CA's certificate. Receptor 1.4 does not bind a
connecting node's ID to its certificate below the mesh, so a node of the mesh claiming another ID is
routed; but work goes to a node over TLS above the mesh, where the controller checks that the node's
certificate names the node: the impostor gets none.
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import lab_variants as variants
from skyrack import pki
from skyrack import plan as planmod
from skyrack.join import receptor
from skyrack.lab import mesh
from skyrack.lab.state import Paths
from skyrack.render import cloud_init
from support import CONFIGS

pytestmark = [pytest.mark.lab]
HOST = "127.0.0.1"


@pytest.fixture
def controller(tmp_path):
    from skyrack.build import receptor as receptor_build

    env = variants.make(CONFIGS / "lab.yaml", tmp_path / "env", "skyrackzz", 77, kubernetes=False)
    p = planmod.make(env)
    paths = Paths(tmp_path / "state")
    binary = receptor_build.binary(say=lambda _m: None)
    pid = mesh.start_controller(p, paths, HOST, binary)
    procs: dict[str, subprocess.Popen] = {}

    def node(name: str, claim: str | None = None, tls: cloud_init.MeshTls | None = None, skip_names: bool = False,
             plain: bool = False) -> Path:
        """Run an execution node from its rendered user-data; `claim` another node ID, `tls` other certificates,
        `skip_names` its own check that its certificate names it, `plain` no TLS at all. Returns its log."""
        issued = mesh.ensure_pki(p, paths, HOST)
        tls = tls or mesh.tls(issued, name)
        ud = yaml.safe_load(cloud_init.execution_node(p, next(x for x in p.env.execution.nodes if x.name == name), tls,
                                                      runner_dir=str(Path(sys.executable).parent)))
        d = tmp_path / f"node-{claim or name}"
        d.mkdir()
        files = {f["path"]: f["content"] for f in ud["write_files"]}
        config = yaml.safe_load(files["/etc/receptor/receptor.yaml"])
        for item in config:  # the same configuration, its paths moved into the test's directory
            if "node" in item:
                item["node"].update(id=claim or name, datadir=str(d / "data"))
            for kind in ("tls-client", "tls-server", "work-verification"):
                for k in ("rootcas", "clientcas", "cert", "key", "publickey"):
                    if k in item.get(kind, {}):
                        dest = d / Path(item[kind][k]).name
                        dest.write_text(files[item[kind][k]])
                        item[kind][k] = str(dest)
                if kind in item and skip_names and kind != "work-verification":
                    item[kind]["skipreceptornamescheck"] = True
            if "control-service" in item:
                item["control-service"]["filename"] = str(d / "control.sock")
            if "tcp-peer" in item:
                item["tcp-peer"]["address"] = f"{HOST}:{mesh.PORT}"
                if plain:
                    del item["tcp-peer"]["tls"]
        (d / "receptor.yaml").write_text(yaml.safe_dump(config))
        log = d / "log"
        procs[claim or name] = subprocess.Popen([str(binary), "--config", str(d / "receptor.yaml")],
                                                stdout=log.open("w"), stderr=subprocess.STDOUT)
        return log

    def leave(node_id: str) -> None:  # the node's machine goes away
        procs[node_id].terminate()
        procs[node_id].wait(timeout=10)

    def routed(wait: float = 8) -> dict:
        deadline = time.monotonic() + wait
        table: dict = {}
        while time.monotonic() < deadline:
            table = receptor.status(str(mesh.socket_path(paths))).get("RoutingTable") or {}
            time.sleep(0.5)
        return table

    def submit(node_id: str, wait: float = 20, signed: bool = True) -> dict:
        """Hand a (bad) payload to `node_id` as the join does; the work unit's status once it leaves Pending
        (reached the node) or after `wait` seconds."""
        ctl = receptor._control(str(mesh.socket_path(paths)))
        try:
            unit = ctl.submit_work(receptor.WORK_TYPE, b"not a payload", node=node_id, tlsclient=cloud_init.RECEPTOR_TLS,
                                   signwork=signed, params={"params": "--private-data-dir=/tmp/skyrack-mesh-test --delete"})
        finally:
            ctl.close()
        deadline = time.monotonic() + wait
        while True:
            st = receptor._control(str(mesh.socket_path(paths)))
            try:
                status = st.simple_command(f"work status {unit['unitid']}")
            finally:
                st.close()
            if status.get("StateName") != "Pending" or time.monotonic() > deadline:
                return {**status, "unitid": unit["unitid"]}
            time.sleep(0.5)

    def handed_off(node_id: str, unit_id: str, timeout: float = 5) -> None:  # what the join waits for
        receptor._wait_handed_off(receptor.Route(str(mesh.socket_path(paths)), node_id), unit_id, timeout=timeout)

    yield node, routed, submit, handed_off, paths.log_dir / "receptor.log", leave, str(mesh.socket_path(paths))
    for proc in procs.values():
        proc.terminate()
        proc.wait(timeout=10)
    assert mesh.stop_controller(pid, paths)
    assert not mesh.data_dir(paths).exists()


def test_an_execution_node_joins_the_mesh_over_mutual_tls_and_takes_work(controller):
    node, routed, submit, handed_off, log, _leave, _socket = controller
    node("x01")
    assert routed() == {"x01": "x01"}
    status = submit("x01")  # it reached the node's worker (which refuses the payload)
    assert status["StateName"] in ("Running", "Failed", "Succeeded"), status
    handed_off("x01", status["unitid"])
    assert "ReceptorNameError" not in log.read_text()


def test_nodes_without_the_mesh_certificate_stay_out_and_an_impostor_gets_no_work(controller):
    node, routed, submit, handed_off, controller_log, leave, socket = controller
    other = pki.create_ca("not the mesh's CA")
    forged = pki.issue(other, "x01", server=True, client=True, other_names=[(cloud_init.RECEPTOR_NODE_ID_OID, "x01")])
    node("x01", plain=True)  # no TLS
    node("x02", claim="x07", tls=cloud_init.MeshTls(other.cert_pem, forged.cert_pem, forged.key_pem,
                                                    pki.keypair("rsa").cert_pem))  # another CA
    log = node("x02", claim="x08")  # the mesh's certificate of x02, claiming to be x08: it does not even start
    node("x02", claim="x09", skip_names=True)  # the same, its own check skipped
    assert routed() == {"x09": "x09"}  # Receptor 1.4 routes it (see the module docstring) ...
    status = submit("x09", wait=10)
    assert status["StateName"] == "Pending"  # ... but its work never leaves the controller:
    assert "RVF ReceptorNameError: expected x09 but found x02" in controller_log.read_text()
    with pytest.raises(receptor.WorkFailed, match="execution node x09 did not take the work within 5 s"):
        handed_off("x09", status["unitid"])  # and the join fails that rack, it does not wait for ever
    assert "nodeID=x08 not found in certificate name(s); names found=[x02]" in log.read_text()
    # the join submits a run its node did not take afresh, each unit released before the next: none is left
    started = time.monotonic()
    with pytest.raises(receptor.NotTaken, match="execution node x09 did not take the work within 2 s"):
        receptor._hand_off(receptor.Route(socket, "x09"), Path("/tmp/skyrack-mesh-test"), io.BytesIO(b"payload"),
                           attempts=2, timeout=2)
    assert time.monotonic() - started >= 4  # two units, each given its time
    ctl = receptor._control(socket)
    try:
        assert ctl.simple_command("work list") == {}
    finally:
        ctl.close()
    # a node that leaves the mesh while its work waits fails the rack then, not at the hand-off's deadline
    unit = submit("x09", wait=2)["unitid"]
    leave("x09")
    started = time.monotonic()
    with pytest.raises(receptor.NodeLost, match="execution node x09 left the Receptor mesh before it took the work"):
        handed_off("x09", unit, timeout=120)
    assert time.monotonic() - started < 60


def test_an_execution_node_runs_only_work_the_controller_signed(controller):
    node, routed, submit, _handed_off, _log, _leave, _socket = controller
    node("x01")
    assert routed() == {"x01": "x01"}
    with pytest.raises(RuntimeError, match="could not verify signature: signature is empty"):
        submit("x01", signed=False)  # the node refuses it as it arrives
