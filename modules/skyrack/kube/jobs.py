"""A researcher's multi-machine job from a few lines: validated against the environment, turned into
the objects the cluster runs, and read back as one status.

The job file says what a researcher knows::

    name: llama-ft
    team: vision
    image: registry.lab.internal/vision/train:1.2
    command: [torchrun, --nnodes=4, train.py]
    machines: 4
    gpus_per_machine: 8
    topology: rack        # host | rack | segment | any
    priority: normal      # preemptible | normal | high

and `manifests` makes what the cluster needs of it, in the team's namespace:

* a **PodGroup** (upstream's gang scheduling, skyrack.scheduler) with ``minCount`` = machines: no pod
  binds until every machine can be placed, so a job never holds half its nodes; it carries the job's
  priority class (the scheduler ranks a gang's pods by their PodGroup's priority, not their own) and
  ``disruptionMode: all``, so a higher-priority job preempts it whole or not at all;
* an **Indexed Job** of one pod per machine (``completions`` = ``parallelism`` = machines,
  ``backoffLimit`` 0: a gang that lost a member is a failed run, restarted as a whole by the
  researcher, not one pod by the Job controller), each pod on a machine of its own (pod
  anti-affinity on the host), all of them within one rack or one L2 segment when the topology says
  so (the PodGroup's topology constraint on the node label the join sets, ``skyrack.io/rack`` or
  ``skyrack.io/segment``: the scheduler picks a domain with room for the whole gang before it places
  a pod, and a gang no domain can hold now waits whole);
  the team's taint (and the GPU taint when it asks for GPUs) tolerated by its exact value, as the
  isolation policies require; the team's priority class by name;
* a **headless Service** named like the job, so the pods reach each other as
  ``<name>-<index>.<name>`` (``MASTER_ADDR`` is ``<name>-0.<name>``; the Job controller sets
  ``JOB_COMPLETION_INDEX``).

Everything the environment can say before anything is submitted is checked here (`check`): the team,
the priority class the team may use, and whether the planned racks can hold the job at all in the
topology asked for. What only the cluster knows (free capacity now, quota in use) is the scheduler's
and the quota's answer, which `status` shows.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, ValidationError

from .. import config, scheduler
from .. import plan as planmod
from ..config.schema import DNS_LABEL, ImageRef, Quantity, Strict
from ..config.validate import pydantic_problems
from ..errors import InputError, Problem
from . import labels as lb
from . import objects as o
from .batch import GPU_RESOURCE

JOB_LABEL = "skyrack.io/job"
PRIORITIES = {"preemptible": "skyrack-preemptible", "normal": "skyrack-normal", "high": "skyrack-high"}
# the node label each placement level keeps a job within (None: anywhere)
TOPOLOGY_KEYS: dict[str, str | None] = {"host": "kubernetes.io/hostname", "rack": planmod.RACK_LABEL,
                                        "segment": planmod.SEGMENT_LABEL, "any": None}
# A pod's hostname is `<name>-<index>`, a DNS label (63 characters) with room for the index.
MAX_NAME = 52


class JobSpec(Strict):
    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=MAX_NAME)]
    team: Annotated[str, Field(pattern=DNS_LABEL)]
    image: ImageRef
    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    machines: Annotated[StrictInt, Field(ge=1, le=8192)] = 1
    gpus_per_machine: Annotated[StrictInt, Field(ge=0, le=16)] = 0
    cpu: Quantity = "1"  # per machine
    memory: Quantity = "1Gi"
    topology: Literal["host", "rack", "segment", "any"] = "any"
    priority: Literal["preemptible", "normal", "high"] = "normal"
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str] = Field(default_factory=dict)


def load(path: Path, text: str | None = None) -> JobSpec:
    """Read and validate a job file (the schema only; `check` judges it against an environment)."""
    label = str(path)
    data = config.read_yaml(path, text)
    if not isinstance(data, dict):
        raise InputError([Problem(label, "", "expected a mapping of keys at the top level (name, team, image, ...)")])
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise InputError(pydantic_problems(label, exc, JobSpec)) from None


_UNITS = {"": 1, "m": 0.001, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def quantity(text: str) -> float:
    """A Kubernetes quantity of the schema's form (`500m`, `2`, `16Gi`) as a number."""
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


@dataclass(frozen=True)
class Placement:
    """Where the job may run by the plan: the machines that can hold one of its pods, by topology domain."""

    domains: dict[str, list[str]] = field(default_factory=dict)  # domain (rack, segment, host, or "any") -> nodes

    @property
    def largest(self) -> tuple[str, int]:
        return max(((d, len(n)) for d, n in self.domains.items()), key=lambda x: (x[1], x[0]), default=("", 0))


def fits(spec: JobSpec, node: planmod.NodeVars) -> bool:
    """Whether one machine of the job fits this node as planned: its team's or a shared rack, enough GPUs,
    and (when the rack's hardware is given) enough allocatable CPU and memory."""
    if node.team not in (None, spec.team) or node.gpu_count < spec.gpus_per_machine:
        return False
    r = node.reservation
    return r is None or (quantity(spec.cpu) * 1000 <= r.allocatable_cpu_m
                         and quantity(spec.memory) <= r.allocatable_memory_mi * 2**20)


def placement(p: planmod.Plan, spec: JobSpec) -> Placement:
    key = TOPOLOGY_KEYS[spec.topology]
    domains: dict[str, list[str]] = defaultdict(list)
    for n in p.nodes:
        if fits(spec, n):
            domains[n.name if key == TOPOLOGY_KEYS["host"] else n.labels[key] if key else "any"].append(n.name)
    return Placement(dict(domains))


def check(p: planmod.Plan, spec: JobSpec, label: str) -> None:
    """Everything the environment says about the job, before anything is submitted. Raises InputError."""
    teams = [t.name for t in p.env.teams]
    if spec.team not in teams:
        raise InputError([Problem(label, "team", f"unknown team {spec.team!r}: the teams of {p.env.name} are "
                                                 f"{', '.join(teams) or 'none'}")])
    problems = []
    allowed = p.env.cluster.teams.get(spec.team, config.TeamLayer()).priority_classes
    if PRIORITIES[spec.priority] not in allowed:
        may = ", ".join(k for k, v in PRIORITIES.items() if v in allowed)
        problems.append(Problem(label, "priority", f"team {spec.team} may not run {spec.priority} jobs "
                                                   f"(cluster.teams.{spec.team}.priority_classes allows: {may})"))
    if spec.topology == "host" and spec.machines > 1:
        problems.append(Problem(label, "topology", f"host keeps a job on one machine, and this one asks for "
                                                   f"{spec.machines}: use rack, segment or any"))
    elif not problems:
        where, most = placement(p, spec).largest
        if most < spec.machines:
            problems.append(_no_room(p, spec, label, where, most))
    if problems:
        raise InputError(problems)


def _no_room(p: planmod.Plan, spec: JobSpec, label: str, where: str, most: int) -> Problem:
    """Why the planned racks cannot hold the job, naming the field to change."""
    scope = {"rack": "one rack", "segment": "one L2 segment", "host": "one host",
             "any": f"team {spec.team}'s racks and the shared ones"}[spec.topology]
    each = f"{spec.gpus_per_machine} GPUs, {spec.cpu} CPU and {spec.memory} each"
    if most:
        at = f" ({spec.topology} {where})" if spec.topology != "any" else ""
        return Problem(label, "machines", f"{spec.machines} machines with {each} do not fit in {scope}: "
                                          f"{p.env.name} plans at most {most} such machines there{at}")
    usable = [n for n in p.nodes if n.team in (None, spec.team)]
    if not usable:
        return Problem(label, "team", f"team {spec.team} has no racks of its own and {p.env.name} has no shared "
                                      "ones: a job of it can run only where a rack names it")
    most_gpus = max(n.gpu_count for n in usable)
    sized = [n.reservation for n in usable if n.reservation is not None]
    largest = f"{most_gpus} GPUs" + (
        f", {max(r.allocatable_cpu_m for r in sized) / 1000:g} CPU and "
        f"{max(r.allocatable_memory_mi for r in sized)}Mi allocatable" if sized else "")
    field_ = "gpus_per_machine" if most_gpus < spec.gpus_per_machine else "cpu, memory"
    return Problem(label, field_, f"no machine of {scope} fits one of this job's ({each}): the largest has "
                                  f"{largest}")


def manifests(spec: JobSpec) -> list[o.Manifest]:
    """The PodGroup, the headless Service and the Job, in the order they are created."""
    ns, name = spec.team, spec.name
    labels = {JOB_LABEL: name, planmod.TEAM_LABEL: spec.team}
    # the label the whole gang shares (one rack, one segment): the scheduler picks that domain for all of it
    shared = TOPOLOGY_KEYS[spec.topology] if spec.topology in ("rack", "segment") and spec.machines > 1 else None
    selector = {JOB_LABEL: name}
    group = o.obj(scheduler.POD_GROUP_API, "PodGroup", name, ns, labels=labels,
                  spec={"schedulingPolicy": {"gang": {"minCount": spec.machines}},
                        **scheduler.whole_gang(PRIORITIES[spec.priority], shared)})
    service = o.obj("v1", "Service", name, ns, labels=labels,
                    spec={"clusterIP": "None", "selector": dict(selector), "publishNotReadyAddresses": True})
    tolerations = lb.team_gpu_tolerations(spec.team) if spec.gpus_per_machine else [lb.team_taint(spec.team).toleration()]
    affinity: dict[str, Any] = {}
    if spec.machines > 1:  # a machine each
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": TOPOLOGY_KEYS["host"]}]}
    requests = {"cpu": spec.cpu, "memory": spec.memory}
    limits: dict[str, str] = {}
    if spec.gpus_per_machine:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(spec.gpus_per_machine)
    env = {"JOB_NAME": name, "NUM_MACHINES": str(spec.machines), "MASTER_ADDR": f"{name}-0.{name}", **spec.env}
    container = o.container("main", spec.image, command=list(spec.command), requests=requests,
                            limits=limits or None, env=[{"name": k, "value": v} for k, v in env.items()])
    pod = {"metadata": {"labels": labels},
           "spec": {"restartPolicy": "Never", "subdomain": name, "priorityClassName": PRIORITIES[spec.priority],
                    "schedulingGroup": {"podGroupName": name}, "tolerations": tolerations,
                    **({"affinity": affinity} if affinity else {}), "containers": [container]}}
    job = o.obj("batch/v1", "Job", name, ns, labels=labels,
                spec={"completionMode": "Indexed", "completions": spec.machines, "parallelism": spec.machines,
                      "backoffLimit": 0, "template": pod})
    return [group, service, job]


@dataclass
class Status:
    """One job as a researcher reads it."""

    name: str
    team: str
    state: str  # queued (no pod placed) | starting | running (every machine) | succeeded | failed | not found
    machines: int = 0
    placed: dict[str, str] = field(default_factory=dict)  # pod -> node
    why: str = ""  # queued: the scheduler's last word; failed: the Job's

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "team": self.team, "state": self.state, "machines": self.machines,
                "placed": self.placed, "why": self.why}


def gang_verdict(group: dict[str, Any] | None) -> str:
    """The scheduler's word on a gang it could not place (its PodGroup's PodGroupInitiallyScheduled=False), which
    speaks of the whole gang ("0/2 placements are available": no rack has room for all of it), where a pod's
    own condition tells only how its last try ended. Its repetition for the preemption attempt is dropped."""
    for c in ((group or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodGroupInitiallyScheduled" and c.get("status") == "False":
            return (c.get("message") or c.get("reason") or "").split(", pod group preemption:")[0]
    return ""


def status(job: dict[str, Any] | None, pods: list[dict[str, Any]], name: str, team: str,
           events: list[dict[str, Any]] = (), group: dict[str, Any] | None = None) -> Status:  # type: ignore[assignment]
    """The state of a job from its Job object, its pods, the Job's events and its PodGroup (as the API server
    returns them)."""
    if not job:
        return Status(name, team, "not found")
    spec, st = job.get("spec") or {}, job.get("status") or {}
    machines = int(spec.get("completions") or 0)
    conditions = {c.get("type"): c for c in st.get("conditions") or [] if c.get("status") == "True"}
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in live if (p.get("spec") or {}).get("nodeName")}
    if "Failed" in conditions:
        c = conditions["Failed"]
        return Status(name, team, "failed", machines, placed, f"{c.get('reason', '')}: {c.get('message', '')}".strip(": "))
    if "Complete" in conditions:
        return Status(name, team, "succeeded", machines, placed)
    running = [p for p in live if (p.get("status") or {}).get("phase") == "Running"]
    if machines and len(running) == machines:
        return Status(name, team, "running", machines, placed)
    why = gang_verdict(group) if not placed else ""
    for p in live if not why else ():
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                why = c.get("message") or c.get("reason") or ""
    refused = [e for e in events if e.get("reason") == "FailedCreate"]
    if not why and not live:
        why = (refused[-1].get("message") or "" if refused
               else "no pods yet: the Job controller has not made them")
    elif not why:
        why = f"{len(running)} of {machines} machines running"
    return Status(name, team, "queued" if not placed else "starting", machines, placed, why)
