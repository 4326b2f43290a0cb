"""`skyrack kube ...`: look at the cluster layer without Pulumi.

- ``skyrack kube manifests ENV``: every object the layer creates, as YAML (or ``--json``),
  with placeholders where the control-plane stack's outputs go; for reviewing a change.
- ``skyrack kube scheduler-config ENV``: the KubeSchedulerConfiguration the API-server VMs run.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
import yaml

from .. import plan as planmod
from .. import scheduler
from ..cliutil import DEFAULT_ENV, EnvArg, JsonOpt, dump_json, err, guarded, ok
from . import concerns

app = typer.Typer(help="The cluster layer (pulumi-kubernetes objects on the control plane).", no_args_is_help=True)

PLACEHOLDERS = {"ca_cert_pem": "<ca_cert_pem of the control-plane stack>", "token_id": "<token-id>",
                "token_secret_part": "<secret>"}


def placeholder_manifests(p: planmod.Plan, now: dt.datetime) -> dict[str, list[dict]]:
    """The layer's manifests with the plan's endpoint and placeholders for the stack's secrets."""
    groups = concerns.all_manifests(p, endpoint=p.apiserver_endpoint, now=now, **PLACEHOLDERS)
    return {k: [{f: v for f, v in m.items() if not f.startswith("_")} for m in ms] for k, ms in groups.items()}


@app.command()
def manifests(path: EnvArg = DEFAULT_ENV, as_json: JsonOpt = False) -> None:
    """Print every Kubernetes object the cluster layer creates for an environment."""
    p = guarded(lambda: planmod.make(path), as_json)
    groups = placeholder_manifests(p, dt.datetime.now(dt.UTC))
    docs = [m for ms in groups.values() for m in ms]
    if as_json:
        dump_json(ok(groups))
    else:
        print(yaml.safe_dump_all(docs, sort_keys=False, width=200), end="")
    kinds = Counter(m["kind"] for m in docs)
    err.print(f"{p.env.name}: {len(docs)} objects in {len(groups)} concerns ("
              + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ")")


@app.command("scheduler-config")
def scheduler_config(
    path: EnvArg = DEFAULT_ENV,
    kubeconfig: Annotated[Path, typer.Option(help="The scheduler's kubeconfig on the VM.")] = Path(
        scheduler.DEFAULT_KUBECONFIG),
) -> None:
    """Print the KubeSchedulerConfiguration (with gang scheduling) for kube-scheduler --config."""
    env = guarded(lambda: planmod.make(path)).env
    print(scheduler.scheduler_config_yaml(env, str(kubeconfig)), end="")
