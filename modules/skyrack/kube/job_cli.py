"""`skyrack job ...`: a researcher's multi-machine job from a short YAML file (skyrack.kube.jobs).

- ``skyrack job submit ENV FILE``: check the job against the environment, then create its PodGroup,
  headless Service and Indexed Job in the team's namespace; ``--dry-run`` prints them and submits nothing.
- ``skyrack job status ENV NAME --team T``: queued (and the scheduler's reason), starting, running
  (which machine each pod is on), succeeded or failed (and why).
- ``skyrack job delete ENV NAME --team T``: the Job, its pods, its Service and its PodGroup.

The cluster is reached with the researcher's own kubeconfig (``--kubeconfig``, else ``$KUBECONFIG``, else
``~/.kube/config``): a client certificate, a token or an exec credential plugin (kubelogin and the like, run
as kubectl runs it: skyrack.kube.kubeconfig), the API server verified against the cluster CA it names. In the
lab, ``--kubeconfig "$(skyrack lab kubeconfig)"``.
"""

from __future__ import annotations

import os
import shlex
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml

from .. import plan as planmod
from .. import scheduler
from ..cliutil import EnvArg, JsonOpt, dump_json, guarded, ok, out
from ..errors import InputError, Problem
from ..files import read_text
from ..term import safe
from . import jobs, readiness
from . import kubeconfig as kubeconfigs
from .health import ApiError

app = typer.Typer(help="A researcher's multi-machine job: submit, status, delete.", no_args_is_help=True)
T = TypeVar("T")

KubeconfigOpt = Annotated[Path | None, typer.Option(
    "--kubeconfig", help="Your kubeconfig (default: $KUBECONFIG, else ~/.kube/config; in the lab: "
                         "\"$(skyrack lab kubeconfig)\").")]
TeamOpt = Annotated[str, typer.Option("--team", help="The job's team (its namespace).")]
NameArg = Annotated[str, typer.Argument(help="The job's name (the file's `name`).")]


def kubeconfig_file(given: Path | None) -> Path:
    if given is not None:
        return given
    for entry in os.environ.get("KUBECONFIG", "").split(os.pathsep):
        if entry and Path(entry).is_file():
            return Path(entry)
    return Path.home() / ".kube" / "config"


def connect(given: Path | None) -> tuple[str, str, kubeconfigs.Credentials]:
    """The endpoint, CA PEM and credentials to reach the cluster with (the kubeconfig's credential plugin run,
    if its user has one). Raises InputError."""
    path = kubeconfig_file(given)
    text = read_text(path, 1 << 20)
    try:
        server, ca = kubeconfigs.server(text, path.parent, str(path))
    except (ValueError, yaml.YAMLError, AttributeError) as exc:
        raise InputError([Problem(str(path), "", f"not a usable kubeconfig: {exc}")]) from None
    if not server.startswith("https://") or not ca:
        raise InputError([Problem(str(path), "clusters", "skyrack reaches a cluster over https with the CA in the "
                                                         "kubeconfig (certificate-authority-data or "
                                                         "certificate-authority)")])
    return server, ca, kubeconfigs.credentials(text, path.parent, str(path), run_exec=True)


def with_api(given: Path | None, fn: Callable[[readiness.Call], T]) -> T:
    server, ca, creds = connect(given)
    with readiness.client(server, ca, creds, timeout=20) as call:
        return fn(call)


def on_cluster(env: Path, kubeconfig: Path | None, as_json: bool, fn: Callable[[readiness.Call], T]) -> T:
    """The environment read first (its problems reported as for any command), then `fn` against the cluster; an
    API server's refusal or silence is one error line."""
    guarded(lambda: planmod.make(env), as_json)
    return guarded(lambda: with_api(kubeconfig, fn), as_json, (ApiError,))


def _ns_path(team: str, api: str, plural: str, name: str = "") -> str:
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    path = f"{base}/namespaces/{urllib.parse.quote(team)}/{plural}"
    return f"{path}/{urllib.parse.quote(name)}" if name else path


PLURALS = {"PodGroup": "podgroups", "Service": "services", "Job": "jobs"}


def path_of(m: dict[str, Any], named: bool = True) -> str:
    meta = m["metadata"]
    return _ns_path(meta["namespace"], m["apiVersion"], PLURALS[m["kind"]], meta["name"] if named else "")


def exists(call: readiness.Call, path: str) -> bool:
    try:
        call("GET", path)
        return True
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise


def _also(kubeconfig: Path | None) -> str:
    """The part of a printed command that reaches the same cluster as this one did."""
    return f" --kubeconfig {shlex.quote(str(kubeconfig))}" if kubeconfig is not None else ""


def submit_all(call: readiness.Call, docs: list[dict[str, Any]], env: Path, kubeconfig: Path | None = None) -> None:
    meta = docs[-1]["metadata"]
    there = [m["kind"] for m in docs if exists(call, path_of(m))]
    if there:
        raise InputError([Problem(str(env), "name", f"{meta['namespace']}/{meta['name']} exists already "
                                                    f"({', '.join(there)}): delete it first (`skyrack job delete "
                                                    f"{shlex.quote(str(env))} {meta['name']} --team "
                                                    f"{meta['namespace']}{_also(kubeconfig)}`) or "
                                                    "choose another name")])
    for m in docs:
        call("POST", path_of(m, named=False), m)


@app.command()
def submit(path: EnvArg,
           file: Annotated[Path, typer.Argument(help="The job file (name, team, image, command, machines, "
                                                     "gpus_per_machine, topology, priority).")],
           dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be created; submit nothing.")]
           = False,
           kubeconfig: KubeconfigOpt = None, as_json: JsonOpt = False) -> None:
    """Check a job against the environment, then create its gang, its Service and its Job."""
    def prepare() -> list[dict[str, Any]]:
        p = planmod.make(path)
        spec = jobs.load(file)
        jobs.check(p, spec, str(file))
        return jobs.manifests(spec)

    docs = guarded(prepare, as_json)
    job = docs[-1]["metadata"]
    if dry_run:
        if as_json:
            dump_json(ok(submitted=False, objects=docs))
        else:
            print(yaml.safe_dump_all(docs, sort_keys=False, width=200), end="")
        return
    guarded(lambda: with_api(kubeconfig, lambda call: submit_all(call, docs, path, kubeconfig)), as_json,
            (ApiError,))
    if as_json:
        dump_json(ok(submitted=True, team=job["namespace"], name=job["name"], objects=[m["kind"] for m in docs]))
    else:
        out.print(f"submitted {safe(job['namespace'])}/{safe(job['name'])}: "
                  f"{docs[-1]['spec']['completions']} machine(s), started together or not at all; "
                  f"`skyrack job status {safe(shlex.quote(str(path)))} {safe(job['name'])} --team "
                  f"{safe(job['namespace'])}{safe(_also(kubeconfig))}` shows where it runs")


def read_status(call: readiness.Call, name: str, team: str) -> jobs.Status:
    try:
        job = call("GET", _ns_path(team, "batch/v1", "jobs", name))
    except ApiError as exc:
        if exc.status != 404:
            raise
        return jobs.status(None, [], name, team)
    selector = urllib.parse.quote(f"{jobs.JOB_LABEL}={name}")
    pods = call("GET", f"{_ns_path(team, 'v1', 'pods')}?labelSelector={selector}").get("items", [])
    fields = urllib.parse.quote(f"involvedObject.kind=Job,involvedObject.name={name}")
    events = call("GET", f"{_ns_path(team, 'v1', 'events')}?fieldSelector={fields}").get("items", [])
    try:
        group = call("GET", _ns_path(team, scheduler.POD_GROUP_API, PLURALS["PodGroup"], name))
    except ApiError as exc:
        if exc.status != 404:
            raise
        group = None
    return jobs.status(job, pods, name, team, events, group)


@app.command()
def status(path: EnvArg, name: NameArg, team: TeamOpt,
           kubeconfig: KubeconfigOpt = None, as_json: JsonOpt = False) -> None:
    """Where a job stands: queued (and why), starting, running (on which machines), succeeded or failed."""
    st = on_cluster(path, kubeconfig, as_json, lambda call: read_status(call, name, team))
    if as_json:
        dump_json(ok(st.as_dict()))
    else:
        out.print(f"{safe(team)}/{safe(name)}: {st.state}" + (f" ({st.machines} machines)" if st.machines else ""))
        for pod, node in sorted(st.placed.items()):
            out.print(f"  {safe(pod)} on {safe(node)}")
        if st.why:
            out.print(f"  {safe(st.why)}")
    if st.state in ("not found", "failed"):
        raise typer.Exit(1)


def delete_all(call: readiness.Call, name: str, team: str) -> list[str]:
    gone = []
    for kind, api in (("Job", "batch/v1"), ("Service", "v1"), ("PodGroup", scheduler.POD_GROUP_API)):
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        try:
            call("DELETE", _ns_path(team, api, PLURALS[kind], name), body)
            gone.append(kind)
        except ApiError as exc:
            if exc.status != 404:
                raise
    return gone


@app.command()
def delete(path: EnvArg, name: NameArg, team: TeamOpt,
           kubeconfig: KubeconfigOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a job: its Job and pods, its Service, its PodGroup (what `submit` made)."""
    gone = on_cluster(path, kubeconfig, as_json, lambda call: delete_all(call, name, team))
    if as_json:
        dump_json(ok(deleted=gone))
    else:
        out.print(f"{safe(team)}/{safe(name)}: " + (f"deleted {', '.join(gone)}" if gone else "nothing to delete"))
