"""The fleet schedule (skyrack.join.fleet) without Ansible: a canary, N at once, the failure policy, the join bound."""

from __future__ import annotations

import threading
import time

import pytest

import lab_variants as variants
from skyrack.join import fleet
from skyrack.join.records import HostResult, RackRun
from support import CONFIGS, run_cli

RACKS = [(f"r{i:02d}", [f"r{i:02d}-n01", f"r{i:02d}-n02"]) for i in range(1, 6)]


class FakeRacks:
    """run_rack stand-in: each rack takes `seconds` (or its own, from `slow`); racks in `fail` end with a failed host."""

    def __init__(self, seconds: float = 0.2, fail: tuple[str, ...] = (), slow: dict[str, float] | None = None):
        self.seconds = seconds
        self.fail = fail
        self.slow = slow or {}
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.started: list[str] = []

    def __call__(self, rack: str, hosts: list[str]) -> RackRun:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.started.append(rack)
        run = RackRun(env="t", rack=rack, check=False, record="", started=time.time())
        time.sleep(self.slow.get(rack, self.seconds))
        run.hosts = [HostResult(host=h, rack=rack, result="failed" if rack in self.fail else "ok") for h in hosts]
        run.ended = time.time()
        with self.lock:
            self.now -= 1
        return run


def test_the_canary_runs_alone_then_n_at_once():
    racks = FakeRacks()
    result = fleet.Fleet(RACKS, racks, parallel=2).run()
    assert [r.rack for r in result.runs] == [r for r, _ in RACKS]
    canary, *rest = result.runs
    assert all(r.started >= canary.ended for r in rest)  # nothing overlaps the canary
    assert racks.most == 2
    assert rest[0].started < rest[1].ended and rest[1].started < rest[0].ended  # r02 and r03 overlap
    assert result.not_started == [] and result.stopped_by is None


def test_without_a_canary_the_first_racks_start_together():
    racks = FakeRacks()
    result = fleet.Fleet(RACKS[:2], racks, parallel=2, canary=False).run()
    a, b = result.runs
    assert a.started < b.ended and b.started < a.ended and racks.most == 2


def test_serial_is_parallel_one():
    racks = FakeRacks(seconds=0.05)
    result = fleet.Fleet(RACKS, racks, parallel=1).run()
    assert racks.most == 1
    assert all(a.ended <= b.started for a, b in zip(result.runs, result.runs[1:], strict=False))


def test_a_failed_canary_starts_nothing_else():
    result = fleet.Fleet(RACKS, FakeRacks(fail=("r01",)), parallel=3).run()
    assert [r.rack for r in result.runs] == ["r01"]
    assert result.stopped_by == "r01" and result.not_started == ["r02", "r03", "r04", "r05"]


def test_a_failed_rack_stops_new_racks_and_the_running_ones_finish():
    stopped = []
    # r03 outlasts r02 by far, so r02's failure is known before any slot frees (not a race with r03)
    racks = FakeRacks(seconds=0.3, fail=("r02",), slow={"r03": 1.5})
    result = fleet.Fleet(RACKS, racks, parallel=2, on_stop=lambda r, left: stopped.append((r, left))).run()
    # r02 and r03 ran together; r02 failed, so r04 and r05 never started, and r03 finished normally
    assert racks.started == ["r01", "r02", "r03"]
    by_rack = {r.rack: r for r in result.runs}
    assert by_rack["r03"].hosts[0].result == "ok" and by_rack["r03"].ended > 0
    assert result.not_started == ["r04", "r05"] and stopped == [("r02", ["r04", "r05"])]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_the_join_budget_admits_joins_at_the_bound():
    clock = Clock()
    budget = fleet.JoinBudget(60, clock)  # one join a second
    assert budget.wait_for(40) == 0
    budget.take(40)
    assert budget.wait_for(40) == pytest.approx(20.0)  # 20 tokens left, 40 needed
    clock.sleep(20)
    assert budget.wait_for(40) == 0
    budget.take(40)
    # a rack larger than the bound starts once the bucket is full, and its debt holds back the next
    clock.sleep(60)
    assert budget.wait_for(100) == 0
    budget.take(100)
    assert budget.wait_for(10) == pytest.approx(50.0)  # -40 tokens: 50 s to get back to +10
    assert fleet.JoinBudget(None).wait_for(10**6) == 0


def test_racks_start_no_faster_than_the_budget():
    clock = Clock()
    racks = [(f"r{i}", [f"h{i}-{k}" for k in range(30)]) for i in range(4)]
    starts: dict[str, float] = {}

    def run_rack(rack, hosts):
        starts[rack] = clock()
        return RackRun(env="t", rack=rack, check=False, record="", started=clock(),
                       hosts=[HostResult(host=h, rack=rack, result="ok") for h in hosts])

    fleet.Fleet(racks, run_rack, parallel=4, budget=fleet.JoinBudget(60, clock), sleep=clock.sleep).run()
    # 30 joins a rack at 60 a minute: the canary and one more at once, then one rack every 30 s
    assert starts == {"r0": 0.0, "r1": 0.0, "r2": pytest.approx(30.0), "r3": pytest.approx(60.0)}


def test_an_error_in_one_rack_lets_the_running_racks_finish_then_is_raised():
    finished = []

    def run_rack(rack, hosts):
        if rack == "r03":
            raise RuntimeError("boom")
        time.sleep(0.2)
        finished.append(rack)
        return RackRun(env="t", rack=rack, check=False, record="", started=time.time(),
                       hosts=[HostResult(host=h, rack=rack, result="ok") for h in hosts])

    f = fleet.Fleet(RACKS, run_rack, parallel=2)
    with pytest.raises(RuntimeError, match="boom"):
        f.run()
    assert "r02" in finished and "r05" not in finished and f.cancel.is_set()


@pytest.mark.parametrize(("args", "message"), [
    (["--parallel", "0"], "Invalid value for '--parallel': Input should be greater than or equal to 1"),
    (["--parallel", "two"], "Invalid value for '--parallel': Input should be a valid integer"),
    (["--joins-per-minute", "0"], "Invalid value for '--joins-per-minute': Input should be greater than or equal to 1"),
])
def test_bad_parallel_input_is_refused_before_any_rack_starts(tmp_path, args, message):
    env = variants.make(CONFIGS / "lab.yaml", tmp_path / "env", "skyrackf0", 50, kubernetes=False)
    runs = tmp_path / "runs"
    proc = run_cli("join", str(env), "--runs-dir", str(runs), *args)
    assert proc.returncode == 2, proc.stderr
    assert message in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr
    assert not runs.exists()


def test_execution_nodes_are_validated_with_the_file(tmp_path):
    import yaml

    env = variants.make(CONFIGS / "lab.yaml", tmp_path / "env", "skyrackf0", 50, kubernetes=False, racks=2)
    data = yaml.safe_load(env.read_text())
    data["execution"] = {"nodes": [{"name": "x01", "racks": ["r01", "r07"]}, {"name": "x02", "racks": ["r01"]},
                                   {"name": "x01", "racks": ["r02"]}]}
    env.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli("validate", str(env))
    assert proc.returncode == 1
    text = " ".join(proc.stderr.split())
    assert f"{env}: execution.nodes[0].racks[1]: unknown rack 'r07' (racks: r01, r02)" in text
    assert f"{env}: execution.nodes[1].racks[0]: rack 'r01' is already served by x01" in text
    assert f"{env}: execution.nodes[2].name: execution node 'x01' is already defined at execution.nodes[0]" in text


def _edited(tmp_path, change) -> object:
    import yaml

    env = variants.make(CONFIGS / "lab.yaml", tmp_path / "env", "skyrackf0", 50, kubernetes=False)
    data = yaml.safe_load(env.read_text())
    change(data)
    env.write_text(yaml.safe_dump(data, sort_keys=False))
    return env


def test_the_rollout_comes_from_the_file_and_the_command_line_overrides_it(tmp_path):
    from skyrack import plan as planmod
    from skyrack.join import driver

    env = _edited(tmp_path, lambda d: d["join"].update(parallel=3, joins_per_minute=40))
    p = planmod.make(env)
    opts = driver.JoinOptions()
    driver.rollout(opts, p)
    assert (opts.parallel, opts.canary, opts.joins_per_minute) == (3, False, 40)  # lab.yaml: no canary
    opts = driver.JoinOptions(parallel=1, canary=True, joins_per_minute=7)
    driver.rollout(opts, p)
    assert (opts.parallel, opts.canary, opts.joins_per_minute) == (1, True, 7)
    env = _edited(tmp_path / "bare", lambda d: d.pop("join"))
    opts = driver.JoinOptions()
    driver.rollout(opts, planmod.make(env))  # no `join:`: one rack at a time, a canary, 200 per minute
    assert (opts.parallel, opts.canary, opts.joins_per_minute) == (1, True, fleet.DEFAULT_JOINS_PER_MINUTE)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["join"].update(parallel=0), "join.parallel: Input should be greater than or equal to 1"),
    (lambda d: d["join"].update(canary="no"), "join.canary: Input should be a valid boolean"),
    (lambda d: d["join"].update(speed=2), "join.speed: unknown key"),
    (lambda d: d["execution"].update(controller="198.18.50.1:99999"),
     "execution.controller: '198.18.50.1:99999': the port must be 1-65535"),
    (lambda d: d["execution"].update(controller="198.18.50.1"), "execution.controller: String should match pattern"),
])
def test_a_bad_rollout_or_controller_is_refused_with_its_field(tmp_path, change, message):
    env = _edited(tmp_path, change)
    proc = run_cli("validate", str(env))
    assert proc.returncode == 1, proc.stdout
    assert f"{env}: {message}" in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr


def test_an_execution_node_boots_receptor_dialling_the_controller(userdata_checker):
    import yaml
    from cryptography import x509

    from skyrack import pki
    from skyrack import plan as planmod
    from skyrack.render import cloud_init

    p = planmod.make(CONFIGS / "lab.yaml")
    x02 = p.env.execution.nodes[1]
    ca = pki.create_ca("mesh CA")
    cert = pki.issue(ca, "x02", server=True, client=True, other_names=[(cloud_init.RECEPTOR_NODE_ID_OID, "x02")])
    signing = pki.keypair("rsa")
    tls = cloud_init.MeshTls(ca.cert_pem, cert.cert_pem, cert.key_pem, signing.cert_pem)
    text = cloud_init.execution_node(p, x02, tls, receptor="/usr/local/bin/receptor", runner_dir="/opt/runner/bin")
    assert userdata_checker.check("x02", text).ok, userdata_checker.check("x02", text).problems
    doc = yaml.safe_load(text)
    files = {f["path"]: f for f in doc["write_files"]}
    assert files["/etc/receptor/tls/node.key"]["permissions"] == "0600"
    assert files["/etc/receptor/tls/node.key"]["content"] == cert.key_pem
    assert files["/etc/receptor/tls/ca.crt"]["content"] == ca.cert_pem
    # the node ID as Receptor reads it: an other name (its OID) holding a UTF8String
    san = pki.load_cert(files["/etc/receptor/tls/node.crt"]["content"]).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert [(o.type_id.dotted_string, o.value) for o in san.get_values_for_type(x509.OtherName)] == \
        [("1.3.6.1.4.1.2312.19.1", b"\x0c\x03x02")]
    config = {k: v for item in yaml.safe_load(files["/etc/receptor/receptor.yaml"]["content"]) for k, v in item.items()}
    assert config["node"] == {"id": "x02", "datadir": "/run/receptor/data"}  # work units in memory (tmpfs)
    assert config["tcp-peer"] == {"address": "198.18.0.1:27199", "redial": True, "tls": "mesh"}  # never in the clear
    assert config["tls-client"] == {"name": "mesh", "rootcas": "/etc/receptor/tls/ca.crt",
                                    "cert": "/etc/receptor/tls/node.crt", "key": "/etc/receptor/tls/node.key"}
    # work arrives over TLS from a client of the mesh's CA only
    assert config["tls-server"] == {"name": "mesh", "cert": "/etc/receptor/tls/node.crt",
                                    "key": "/etc/receptor/tls/node.key", "requireclientcert": True,
                                    "clientcas": "/etc/receptor/tls/ca.crt"}
    assert config["control-service"]["tls"] == "mesh"
    # and runs only work the controller signed
    assert config["work-verification"] == {"publickey": "/etc/receptor/tls/work-signing.pub"}
    assert files["/etc/receptor/tls/work-signing.pub"]["content"] == signing.cert_pem
    assert signing.key_pem.strip().splitlines()[1] not in text  # the signing key stays with the controller
    assert config["work-command"] == {"worktype": "ansible-runner", "command": "/opt/runner/bin/ansible-runner",
                                      "params": "worker", "allowruntimeparams": True, "verifysignature": True}
    unit = files["/etc/systemd/system/skyrack-receptor.service"]["content"]
    assert "ExecStart=/usr/local/bin/receptor --config /etc/receptor/receptor.yaml" in unit
    assert "Environment=PATH=/opt/runner/bin:" in unit and "Restart=always" in unit
    assert doc["runcmd"][-2:] == [["systemctl", "enable", "skyrack-receptor.service"],
                                  ["systemctl", "restart", "skyrack-receptor.service"]]


def test_the_lab_refuses_an_execution_section_it_does_not_run(tmp_path):
    env = _edited(tmp_path, lambda d: d["execution"].update(receptor_socket="/run/other.sock",
                                                             controller="198.18.50.1:1234"))
    proc = run_cli("lab", "status", str(env))
    assert proc.returncode == 1
    text = " ".join(proc.stderr.split())
    assert f"{env}: execution.receptor_socket: the lab's Receptor control socket is " \
           "/var/lib/skyrack/lab/skyrackf0/receptor/control.sock; set that" in text, text
    assert f"{env}: execution.controller: the lab's Receptor listens on 198.18.50.1:27199; set that" in text


def test_a_work_unit_its_node_never_took_is_released_and_submitted_again(monkeypatch, tmp_path):
    """Receptor 1.4 can leave a unit Pending for good when its first start on the node fails under load: the
    join releases it (inside the wait) and submits the run afresh; a unit the node itself created is never
    submitted twice (the run could start there), nor is a run submitted more than the attempts allow."""
    import io

    from skyrack.join import receptor

    route = receptor.Route("/nonexistent.sock", "x01")

    def hand_off(verdicts: list) -> tuple[list[str], str | Exception]:
        submitted: list[str] = []
        payloads: list[bytes] = []

        def submit(_route, _run_dir, payload):
            payloads.append(payload.read())
            submitted.append(f"u{len(submitted) + 1}")
            return submitted[-1]

        def wait(_route, unit_id, _timeout):
            verdict = verdicts[len(submitted) - 1]
            if verdict != "taken":
                raise receptor.NotTaken(f"{unit_id} not taken", on_node=verdict == "on node")

        monkeypatch.setattr(receptor, "_submit", submit)
        monkeypatch.setattr(receptor, "_wait_handed_off", wait)
        try:
            result: str | Exception = receptor._hand_off(route, tmp_path, io.BytesIO(b"payload"), attempts=3)
        except receptor.NotTaken as exc:
            result = exc
        assert set(payloads) == {b"payload"}  # every submission sends the whole payload
        return submitted, result

    assert hand_off(["taken"]) == (["u1"], "u1")
    assert hand_off(["pending", "taken"]) == (["u1", "u2"], "u2")
    submitted, result = hand_off(["pending", "on node"])
    assert submitted == ["u1", "u2"] and isinstance(result, receptor.NotTaken) and "u2" in str(result)
    submitted, result = hand_off(["pending"] * 5)
    assert submitted == ["u1", "u2", "u3"] and isinstance(result, receptor.NotTaken)
