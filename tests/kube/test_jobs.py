"""A researcher's job file (skyrack.kube.jobs, `skyrack job`): what it becomes, what the environment
refuses before anything is submitted, and how a job's state is read back."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from skyrack import pki, scheduler
from skyrack import plan as planmod
from skyrack.errors import InputError
from skyrack.kube import job_cli, jobs
from skyrack.kube.health import ApiError
from support import run_cli

from .conftest import CONFIGS
from .placement import tolerates

JOB = {"name": "llama-ft", "team": "robotics", "image": "registry.lab.internal/robotics/train:1.2",
       "command": ["torchrun", "train.py"], "machines": 4, "gpus_per_machine": 8, "topology": "rack"}


@pytest.fixture(scope="module")
def prod() -> planmod.Plan:
    return planmod.make(CONFIGS / "prod.yaml")


def write(tmp_path: Path, **changes) -> Path:
    doc = {**JOB, **changes}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in doc.items() if v is not None}))
    return path


def spec(**changes) -> jobs.JobSpec:
    return jobs.JobSpec.model_validate({**JOB, **changes})


def by_kind(docs: list[dict]) -> dict[str, dict]:
    return {d["kind"]: d for d in docs}


def test_a_job_becomes_a_gang_a_headless_service_and_an_indexed_job_in_the_teams_namespace(prod):
    docs = jobs.manifests(spec())
    assert [d["kind"] for d in docs] == ["PodGroup", "Service", "Job"]  # the gang exists before its pods
    assert {d["metadata"]["namespace"] for d in docs} == {"robotics"}
    kinds = by_kind(docs)
    assert kinds["PodGroup"]["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    # preempted whole, ranked by the job's class (the scheduler takes a gang's priority from its PodGroup)
    assert kinds["PodGroup"]["spec"]["disruptionMode"] == {"all": {}}
    assert kinds["PodGroup"]["spec"]["priorityClassName"] == "skyrack-normal"
    job = kinds["Job"]["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"], job["backoffLimit"]) == ("Indexed", 4, 4, 0)
    pod = job["template"]["spec"]
    assert pod["schedulingGroup"] == {"podGroupName": "llama-ft"}
    assert pod["subdomain"] == kinds["Service"]["metadata"]["name"] == "llama-ft"
    assert kinds["Service"]["spec"]["clusterIP"] == "None"
    assert kinds["Service"]["spec"]["selector"].items() <= job["template"]["metadata"]["labels"].items()
    main = pod["containers"][0]
    assert main["command"] == ["torchrun", "train.py"]
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert {e["name"]: e["value"] for e in main["env"]}["MASTER_ADDR"] == "llama-ft-0.llama-ft"
    # one machine per pod; the gang, not each pod, is held to one rack (the scheduler picks a rack for all of it)
    anti, = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == {"labelSelector": {"matchLabels": {jobs.JOB_LABEL: "llama-ft"}}, "topologyKey": "kubernetes.io/hostname"}
    assert "podAffinity" not in pod["affinity"]
    assert kinds["PodGroup"]["spec"]["schedulingConstraints"] == {"topology": [{"key": planmod.RACK_LABEL}]}
    # it lands on its team's GPU nodes as the join taints them, and on no other team's
    node = next(n for n in prod.nodes if n.team == "robotics")
    assert all(tolerates(pod, t) for t in node.taints)
    other = next(n for n in prod.nodes if n.team == "vision")
    assert not all(tolerates(pod, t) for t in other.taints)
    assert pod["priorityClassName"] == "skyrack-normal"


@pytest.mark.parametrize("priority", sorted(jobs.PRIORITIES))
def test_the_gang_and_its_pods_carry_the_same_class(priority):
    """The scheduler ranks a gang's pods by their PodGroup: a preemptible job whose PodGroup had no class would
    get the cluster's default (skyrack-normal) and could no longer be preempted by normal work."""
    kinds = by_kind(jobs.manifests(spec(priority=priority)))
    pod = kinds["Job"]["spec"]["template"]["spec"]
    assert kinds["PodGroup"]["spec"]["priorityClassName"] == pod["priorityClassName"] == jobs.PRIORITIES[priority]


@pytest.mark.parametrize(("topology", "machines", "key"), [
    ("rack", 4, planmod.RACK_LABEL), ("segment", 4, planmod.SEGMENT_LABEL), ("any", 4, None), ("rack", 1, None)])
def test_the_topology_names_the_node_label_the_gang_shares(topology, machines, key):
    kinds = by_kind(jobs.manifests(spec(topology=topology, machines=machines)))
    constraint = kinds["PodGroup"]["spec"].get("schedulingConstraints")
    assert (constraint["topology"][0]["key"] if constraint else None) == key
    pod = kinds["Job"]["spec"]["template"]["spec"]
    assert ("podAntiAffinity" in pod.get("affinity", {})) == (machines > 1)


def test_the_gates_that_make_gangs_whole_are_on_where_the_jobs_podgroups_are_served():
    """What `skyrack job` writes into a PodGroup needs the newest minor's gates: the API server drops a gated
    field whose gate is off (schedulingConstraints) and the scheduler ignores what it does not know."""
    gates = scheduler.GANGS[scheduler.NEWEST].gates
    assert scheduler.POD_GROUP_API == scheduler.GANGS[scheduler.NEWEST].api == "scheduling.k8s.io/v1beta1"
    assert gates == {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True}
    assert scheduler.gangs("1.37.2").feature_gates == "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"


def test_a_one_machine_cpu_job_has_no_affinity_and_no_gpu_toleration():
    pod = by_kind(jobs.manifests(spec(machines=1, gpus_per_machine=0, topology="host")))["Job"]["spec"]["template"]["spec"]
    assert "affinity" not in pod
    assert [t["key"] for t in pod["tolerations"]] == [planmod.TEAM_TAINT_KEY]
    assert "limits" not in pod["containers"][0]["resources"]


def test_every_object_validates_against_the_kubernetes_schema_and_tolerates_as_the_team_policies_ask(prod):
    version = prod.env.kubernetes.version
    docs = jobs.manifests(spec(topology="segment", env={"NCCL_DEBUG": "INFO"}))
    for d in docs:
        kubernetes_validate.validate(d, version, strict=True)
    bad = by_kind(json.loads(json.dumps(docs)))["Job"]
    bad["spec"]["template"]["spec"]["subdomian"] = "x"  # the validator does look inside the template
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, version, strict=True)
    # the tolerations are the kind skyrack-team-tolerations admits in the team's namespace: a key, its own value
    pod = by_kind(docs)["Job"]["spec"]["template"]["spec"]
    assert all(t["key"] and t.get("operator", "Equal") == "Equal" for t in pod["tolerations"])


def test_a_rack_job_that_fits_a_planned_rack_passes(prod):
    jobs.check(prod, spec(machines=64), "job.yaml")  # a prod rack is 64 machines of 8 GPUs
    jobs.check(prod, spec(machines=65, topology="any"), "job.yaml")  # robotics has 28 racks


@pytest.mark.parametrize(("changes", "field", "says"), [
    ({"team": "chemistry"}, "team", "unknown team 'chemistry': the teams of prod are robotics, language, vision, rl"),
    ({"priority": "high"}, "priority", "team robotics may not run high jobs (cluster.teams.robotics.priority_classes "
                                       "allows: preemptible, normal)"),
    ({"machines": 65}, "machines", "65 machines with 8 GPUs, 1 CPU and 1Gi each do not fit in one rack: prod plans "
                                   "at most 64 such machines there (rack r"),
    ({"gpus_per_machine": 9}, "gpus_per_machine", "no machine of one rack fits one of this job's (9 GPUs"),
    ({"cpu": "500", "topology": "any"}, "cpu, memory", "(8 GPUs, 500 CPU and 1Gi each): the largest has 8 GPUs, 2"),
    ({"topology": "host"}, "topology", "host keeps a job on one machine, and this one asks for 4"),
])
def test_what_the_environment_refuses_is_named_before_anything_is_submitted(prod, changes, field, says):
    with pytest.raises(InputError) as exc:
        jobs.check(prod, spec(**changes), "job.yaml")
    [problem] = exc.value.problems
    assert (problem.file, problem.path) == ("job.yaml", field)
    assert says in problem.message, problem.message


@pytest.mark.parametrize(("text", "says"), [
    ("name: UPPER\n", "name: String should match pattern"),
    ("nmae: x\n", "nmae: unknown key (did you mean 'name'?)"),
    ("topology: galaxy\n", "topology: Input should be 'host', 'rack', 'segment' or 'any'"),
    ("command: []\n", "command: List should have at least 1 item"),
    ("machines: '4'\n", "machines: Input should be a valid integer"),
    ("- a list\n", "expected a mapping of keys at the top level"),
])
def test_a_bad_job_file_names_the_field(tmp_path, text, says):
    base = {k: v for k, v in JOB.items() if k not in yaml.safe_load(text) or not isinstance(yaml.safe_load(text), dict)}
    path = tmp_path / "job.yaml"
    path.write_text(text if text.startswith("-") else yaml.safe_dump(base) + text)
    with pytest.raises(InputError) as exc:
        jobs.load(path)
    assert any(says in str(p) for p in exc.value.problems), exc.value.problems


def test_submit_dry_run_prints_the_objects_and_bad_input_is_one_line_and_exit_1(tmp_path):
    proc = run_cli("job", "submit", str(CONFIGS / "prod.yaml"), str(write(tmp_path)), "--dry-run", check=True)
    assert [d["kind"] for d in yaml.safe_load_all(proc.stdout)] == ["PodGroup", "Service", "Job"]
    proc = run_cli("job", "submit", str(CONFIGS / "prod.yaml"), str(write(tmp_path)), "--dry-run", "--json", check=True)
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True and doc["submitted"] is False and len(doc["objects"]) == 3
    proc = run_cli("job", "submit", str(CONFIGS / "prod.yaml"), str(write(tmp_path, team="chemistry")))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith(f"error {tmp_path / 'job.yaml'}: team: unknown team 'chemistry'")


def test_a_kubeconfig_that_is_missing_or_not_one_is_a_clear_error_and_nothing_is_sent(tmp_path):
    job = str(write(tmp_path, machines=2))
    proc = run_cli("job", "submit", str(CONFIGS / "prod.yaml"), job, "--kubeconfig", str(tmp_path / "none"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and str(tmp_path / "none") in proc.stderr
    bad = tmp_path / "kubeconfig"
    bad.write_text("clusters: [{name: c, cluster: {server: 'http://10.0.0.1:8080'}}]\n")
    proc = run_cli("job", "status", str(CONFIGS / "prod.yaml"), "llama-ft", "--team", "robotics",
                   "--kubeconfig", str(bad))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{bad}: clusters: skyrack reaches a cluster over https with the CA" in proc.stderr


def test_an_api_server_that_does_not_answer_is_one_error_line(tmp_path):
    ca_pem = pki.create_ca("test-ca").cert_pem
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9",
                                               "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode()}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x",
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    proc = run_cli("job", "delete", str(CONFIGS / "prod.yaml"), "llama-ft", "--team", "robotics", "--kubeconfig",
                   str(cfg), timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "ConnectionRefusedError" in proc.stderr, proc.stderr


class FakeCall:
    def __init__(self, present: set[str]):
        self.present, self.posted = present, []

    def __call__(self, method: str, path: str, body: dict | None = None, **_kw) -> dict:
        if method == "GET":
            if path not in self.present:
                raise ApiError(404, "not found")
            return {}
        assert method == "POST"
        self.posted.append(body["kind"])
        return {}


def test_submit_creates_the_gang_first_and_refuses_a_name_in_use_before_creating_anything(tmp_path):
    docs = jobs.manifests(spec())
    call = FakeCall(set())
    job_cli.submit_all(call, docs, Path("configs/prod.yaml"))
    assert call.posted == ["PodGroup", "Service", "Job"]
    call = FakeCall({job_cli.path_of(by_kind(docs)["Service"])})  # left over by an earlier run
    with pytest.raises(InputError, match=r"robotics/llama-ft exists already \(Service\): delete it first "
                                         r"\(`skyrack job delete configs/prod.yaml llama-ft --team robotics`\)"):
        job_cli.submit_all(call, docs, Path("configs/prod.yaml"))
    assert call.posted == []


def pod(name: str, node: str | None, phase: str = "Pending", unschedulable: str = "") -> dict:
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}] \
        if unschedulable else []
    return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": conditions}}


JOB_OBJ = {"spec": {"completions": 2}, "status": {}}


def test_a_gang_no_rack_can_hold_is_queued_with_the_schedulers_word_on_the_whole_gang():
    """As the lab's scheduler wrote it (a 2-machine rack job, one of r01's nodes cordoned): the PodGroup's verdict,
    not the last pod's, and without its repetition for the preemption attempt."""
    verdict = ("pod group is unschedulable, 0/2 placements are available, first placement status: minCount (2) "
               "cannot be satisfied: 1 scheduled, 0 remaining")
    group = {"status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "False",
                                        "reason": "Unschedulable", "message": f"{verdict}, pod group preemption: "
                                                                             f"{verdict}"}]}}
    pods = [pod("x-0", None, unschedulable="0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules."),
            pod("x-1", None)]
    st = jobs.status(JOB_OBJ, pods, "x", "robotics", [], group)
    assert (st.state, st.why) == ("queued", verdict)
    # a gang the scheduler has not judged yet, or one it placed: the pods' word as before
    assert "anti-affinity" in jobs.status(JOB_OBJ, pods, "x", "robotics", [], {"status": {}}).why


@pytest.mark.parametrize(("job", "pods", "events", "state", "why"), [
    (None, [], [], "not found", ""),
    (JOB_OBJ, [], [], "queued", "no pods yet"),
    (JOB_OBJ, [], [{"reason": "FailedCreate", "message": "pods \"x-0\" is forbidden: exceeded quota: team-quota"}],
     "queued", "exceeded quota: team-quota"),
    (JOB_OBJ, [pod("x-0", None, unschedulable="0/5 nodes are available: 3 Insufficient nvidia.com/gpu."),
               pod("x-1", None)], [], "queued", "Insufficient nvidia.com/gpu"),
    (JOB_OBJ, [pod("x-0", "n1", "Running"), pod("x-1", "n2")], [], "starting", "1 of 2 machines running"),
    (JOB_OBJ, [pod("x-0", "n1", "Running"), pod("x-1", "n2", "Running")], [], "running", ""),
    ({"spec": {"completions": 2}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}, [], [],
     "succeeded", ""),
    ({"spec": {"completions": 2}, "status": {"conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the "
                                                                                       "specified backoff limit"}]}},
     [pod("x-0", "n1", "Failed")], [], "failed", "BackoffLimitExceeded: Job has reached"),
])
def test_a_jobs_state_is_read_from_its_job_its_pods_and_its_events(job, pods, events, state, why):
    st = jobs.status(job, pods, "x", "robotics", events)
    assert st.state == state
    assert why in st.why
    if state == "running":
        assert st.placed == {"x-0": "n1", "x-1": "n2"}
