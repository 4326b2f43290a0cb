"""What a revision's own code derives from its environment files, as canonical JSON.

`skyrack diff` runs this module once per revision (`revision`), in a subprocess whose
`skyrack` is that revision's (`python -m skyrack.gitops.derive configs/dev.yaml ...`, cwd
the revision's tree), or in-process (`facts`) when that code is the one loaded, so a
change to the IPAM code, a template, a role or a stack program is seen by its effect on
each environment, not only a change to an environment file.

Facts per environment, in families (`effects` compares them):

* ``plan``: the plan (`Plan.to_dict`), lists keyed by name: subnets, addresses, zones,
  sizes, pod ranges, labels;
* ``user_data``: the `#cloud-config` of every control-plane VM and cloud pool, rendered
  with placeholder certificates (fixed text, so only what the code and the file decide
  differs); the Kubernetes apt repository from ``mirrors.kubernetes`` or the stack's
  ``skyrack:kubernetesAptRepo``;
* ``stack``: the Pulumi stack settings (`configs/Pulumi.<env>.yaml`, and the cluster
  project's), secrets as a digest of their ciphertext only;
* ``cluster``: every object of the cluster layer (`skyrack kube manifests`);
* ``racks``: what a rack run applies: the playbook and each role's files (digests), and
  the kubelet files the join renders for each rack (per-node values as placeholders);
* ``programs``: digests of the two Pulumi programs' code (what only a preview can judge).

A family that fails to derive (an older revision's API, a broken template) is recorded
as ``{"unavailable": reason}`` rather than failing the whole run. Only the standard
library and skyrack's own modules are imported, lazily per family; the file runs
against the code of the revision it was copied into (`skyrack diff` copies it into a
revision that predates it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import inspect
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

FORMAT = 1
NOW = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)  # manifests that carry a time (token expiry) get this one
PEM = "-----BEGIN {0}-----\nplaceholder {1}\n-----END {0}-----\n"
Facts = dict[str, Any]
PLACEHOLDERS = {"ca_cert_pem": "<ca_cert_pem of the control-plane stack>", "token_id": "<token-id>",
                "token_secret_part": "<secret>"}


def code_root() -> Path:
    """The tree whose code runs: `modules/skyrack` is two levels below it."""
    return Path(__file__).resolve().parents[3]


def digest(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:16]


def tree_digests(root: Path, *paths: str) -> dict[str, str]:
    """File (relative to root) -> digest, for every file under the given paths."""
    out: dict[str, str] = {}
    for rel in paths:
        base = root / rel
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
        for f in files:
            if "__pycache__" not in f.parts and f.suffix != ".pyc":
                out[str(f.relative_to(root))] = digest(f.read_bytes())
    return out


# ----------------------------------------------------------------------------- families


def plan_facts(plan: Any, _where: Where) -> Facts:
    """`Plan.to_dict()` keyed by name; nodes' labels and taints (shared per rack) as one table."""
    import dataclasses

    d = dataclasses.replace(plan, nodes=[]).to_dict()  # the nodes without asdict's deep copies (7,680 in prod)
    for key in ("source", "lock", "environment", "nodes"):
        d.pop(key, None)
    d["onprem_pod_ranges"] = plan.onprem_pod_ranges
    for key in ("members", "pools"):
        d[key] = {item.pop("name"): item for item in d[key]}
    d["nodes"], d["node_meta"] = {}, {}
    keys: dict[tuple[int, int], str] = {}  # a rack's nodes share their label and taint objects
    for n in plan.nodes:
        node = dict(vars(n))
        if n.reservation is not None:
            node["reservation"] = asdict(n.reservation)
        labels, taints = node.pop("labels"), node.pop("taints")
        key = keys.get((id(labels), id(taints)))
        if key is None:
            meta = {"labels": labels, "taints": taints}
            key = keys[id(labels), id(taints)] = digest(json.dumps(meta, sort_keys=True))
            d["node_meta"][key] = meta
        node["meta"] = key
        d["nodes"][node.pop("name")] = node
    return d


def _placeholder_pki(cls: type, what: str) -> Any:
    """An instance of a PKI dataclass with fixed placeholder text in every field."""
    import dataclasses

    values = {}
    for f in dataclasses.fields(cls):
        kind = "CERTIFICATE" if f.name.endswith("cert") else "PUBLIC KEY" if f.name.endswith("pub") else "PRIVATE KEY"
        pem = f.name.endswith(("cert", "key", "pub"))
        values[f.name] = PEM.format(kind, f"{what} {f.name}") if pem else f"placeholder-{f.name}"
    return cls(**values)


@dataclass(frozen=True)
class Where:
    """Where an environment's plan came from: its repository-relative path, a reader of the
    revision's files (repository-relative paths; None when absent) and the code's tree."""

    path: str
    read: Callable[[str], str | None]
    root: Path

    def settings(self, stack_file: str) -> dict[str, Any]:
        """A Pulumi stack settings file's `config:` (secrets as a digest of their ciphertext only)."""
        import yaml

        text = self.read(stack_file)
        data = ((yaml.safe_load(text) or {}).get("config") or {}) if text else {}
        return {k: {"secret": digest(str(v["secure"]))} if isinstance(v, dict) and "secure" in v else v
                for k, v in sorted(data.items())}

    def stack_settings(self, env: str) -> dict[str, Any]:
        return self.settings(str(PurePosixPath(self.path).with_name(f"Pulumi.{env}.yaml")))


def kubernetes_repo(plan: Any, where: Where) -> str | None:
    """The API servers' apt repository, as the Azure stack picks it."""
    return plan.env.mirrors.kubernetes or where.stack_settings(plan.env.name).get("skyrack:kubernetesAptRepo")


def user_data(plan: Any, where: Where) -> Facts:
    """`vms`: name -> {role, text} (cloud pools: role "pool"); `problem`: why the stack cannot render some."""
    from ..render import cloud_init

    etcd_pki = _placeholder_pki(cloud_init.EtcdPki, "etcd")
    api_pki = _placeholder_pki(cloud_init.ApiServerPki, "apiserver")
    join = _placeholder_pki(cloud_init.WorkerJoin, "join")
    repo = kubernetes_repo(plan, where)
    # etcd members install etcd from that repository since the move to Kubernetes 1.37; before, from Debian
    etcd_repo = {"kubernetes_repo": repo} if "kubernetes_repo" in inspect.signature(cloud_init.etcd).parameters else {}
    vms: Facts = {}
    for m in plan.members:
        if m.role != "apiserver" and (repo or not etcd_repo):
            vms[m.name] = {"role": m.role, "text": cloud_init.etcd(plan, m, etcd_pki, **etcd_repo)}
        elif m.role == "apiserver" and repo:
            vms[m.name] = {"role": m.role, "text": cloud_init.apiserver(plan, m, api_pki, kubernetes_repo=repo)}
    for pool in plan.pools if repo else []:
        vms[f"pool-{pool.name}"] = {"role": "pool", "text": cloud_init.pool_node(plan, pool, join,
                                                                                 kubernetes_repo=repo)}
    problem = None
    if not repo and plan.env.lab is None:
        problem = ("no Kubernetes apt repository: neither mirrors.kubernetes nor the stack setting "
                   "skyrack:kubernetesAptRepo is set, so `pulumi preview` and `pulumi up` stop")
    return {"lab": plan.env.lab is not None, "vms": vms, "problem": problem}


def stack(plan: Any, where: Where) -> Facts:
    if plan.env.lab is not None:
        return {}
    name = plan.env.name
    return {"controlplane": where.stack_settings(name), "cluster": where.settings(f"stacks/cluster/Pulumi.{name}.yaml")}


def cluster(plan: Any, _where: Where) -> Facts:
    """The cluster layer's objects, as `skyrack kube manifests` prints them (fixed placeholders for the
    control-plane stack's outputs; `skyrack.kube.cli` itself is not imported: it loads the whole CLI)."""
    from ..kube import concerns

    out: Facts = {}
    groups = concerns.all_manifests(plan, endpoint=plan.apiserver_endpoint, now=NOW, **PLACEHOLDERS)
    for concern, manifests in groups.items():
        for obj in ({f: v for f, v in m.items() if not f.startswith("_")} for m in manifests):
            meta = obj.get("metadata") or {}
            key = "/".join(x for x in (obj.get("kind"), meta.get("namespace"), meta.get("name")) if x)
            out[key] = {"concern": concern, "object": obj}
    return out


JOIN_FILES = {"kubelet-config.yaml": "join/kubelet-config.yaml.j2", "kubelet-flags.env": "join/kubelet-flags.env.j2"}


def racks(plan: Any, where: Where) -> Facts:
    """The playbook and roles (digests) and, per rack, the files the join renders for any of its nodes.

    The files are rendered with the rack's variables and placeholders for the per-node ones
    (address, pod range: plan facts), from one node's variables (`join.node_files.node_vars`)
    with each rack's swapped in: the roles' defaults are read once, not per rack.
    """
    from .. import inventory

    try:
        from ..join import node_files as join_render
    except ImportError:  # a revision from before the module's rename
        from ..join import render as join_render  # type: ignore[no-redef]

    if not plan.nodes:
        return {}
    base = join_render.node_vars(plan, plan.nodes[0].name)
    # rack_vars takes the plan from the revision that added rack peers on; older revisions take the node only
    with_plan = len(inspect.signature(inventory.rack_vars).parameters) > 1
    files: dict[str, dict[str, str]] = {}
    for n in plan.nodes:
        if n.rack not in files:
            rack = inventory.rack_vars(n, plan) if with_plan else inventory.rack_vars(n)
            v = {**base, **rack, **{k: f"<{k}>" for k in inventory.host_vars(n)},
                 "inventory_hostname": "<inventory_hostname>"}
            files[n.rack] = {name: join_render.render(t, v) for name, t in JOIN_FILES.items()}
    root = where.root
    roles = sorted(p.name for p in (root / "ansible/roles").iterdir() if p.is_dir())
    return {"nodes": len(plan.nodes), "playbooks": tree_digests(root, "ansible/playbooks", "ansible/ansible.cfg",
                                                                  "ansible/plugins"),
            "roles": {r: tree_digests(root, f"ansible/roles/{r}") for r in roles},
            "templates": tree_digests(root, "modules/skyrack/templates/join"),
            "files": files}


def programs(plan: Any, where: Where) -> Facts:
    root = where.root
    cluster_code = {k: v for k, v in tree_digests(root, "stacks/cluster", "modules/skyrack/kube").items()
                    if not k.endswith("cli.py")}
    out = {"cluster": cluster_code}
    if plan.env.lab is None:
        out["azure"] = tree_digests(root, "stacks/__main__.py", "stacks/controlplane.py", "modules/skyrack/azure")
    return out


FAMILIES: dict[str, Callable[[Any, Where], Facts]] = {
    "plan": plan_facts, "user_data": user_data, "stack": stack, "cluster": cluster, "racks": racks,
    "programs": programs,
}


def facts(plan: Any, where: Where, skip: frozenset[str] = frozenset()) -> Facts:
    """Every family of facts of one planned environment (but those in skip)."""
    out: Facts = {}
    for name, fn in FAMILIES.items():
        if name in skip:
            continue
        try:
            out[name] = fn(plan, where)
        except Exception as exc:
            out[name] = {"unavailable": f"{type(exc).__name__}: {exc}"}
    return out


def _read(path: str) -> str | None:
    p = Path(path)
    return p.read_text() if p.is_file() else None


def derive(path: str) -> Facts:
    """Plan the environment file at `path` (relative to the current directory) and derive its facts."""
    from .. import plan as planmod
    from ..errors import InputError

    try:
        plan = planmod.make(path, require_lock=False)
    except InputError as exc:
        return {"error": [str(p) for p in exc.problems]}
    return facts(plan, Where(path, _read, code_root()))


def main(argv: list[str]) -> int:
    json.dump({"format": FORMAT, "environments": {p: derive(p) for p in argv}}, sys.stdout, sort_keys=True,
              separators=(",", ":"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
