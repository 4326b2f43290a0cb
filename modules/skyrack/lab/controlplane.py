"""The lab's control plane: the Azure members' user-data, rendered by the same functions, seeded into lab nodes.

`skyrack etcd lab-up` (or `seed` + `skyrack lab up --seed-dir`) boots every etcd member
(and events member) of a lab environment with exactly the `#cloud-config` the Pulumi
stack passes to the Azure VM as custom data: `render.cloud_init.etcd` and
`render.cloud_init.apiserver`, fed with certificates from `certs.issue_all` (the list
the stack issues from). The certificates are made once per lab and kept under the
lab's state directory, readable by root only; `lab down` deletes them with the lab.

The API servers are seeded only when the environment names a Kubernetes package
mirror (`mirrors.kubernetes`): kubeadm cannot be installed without one.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from .. import azurite, certs, pki
from ..errors import InputError, Problem
from ..files import write_private
from ..plan import Member, Plan
from ..render import cloud_init
from .state import Paths

CLIENT_CN = "skyrack-etcd-admin"  # the operator's etcd client (`skyrack etcd ...` against the lab)


def home(paths: Paths) -> Path:
    return paths.root / "controlplane"


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def ensure_pki(plan: Plan, paths: Paths) -> certs.PlanPki:
    """The lab's certificates: issued on first use, read back afterwards (so re-seeding is stable)."""
    store = _private_dir(home(paths)) / "pki.json"
    if store.exists():
        data = json.loads(store.read_text())
        issued = {k: {n: pki.Issued(**v) for n, v in data[k].items()} for k in ("cas", "certs")}
        return certs.PlanPki(cas=issued["cas"], certs=issued["certs"], service_account=pki.Issued(**data["sa"]),
                             bootstrap_token=data["token"], extra=data.get("extra", {}))
    pp = certs.issue_all(plan)
    client = pki.issue(pp.cas["etcd"], CLIENT_CN, client=True)
    pp.certs["etcd-admin-client"] = client
    write_private(store, json.dumps({
        "cas": {k: asdict(v) for k, v in pp.cas.items()}, "certs": {k: asdict(v) for k, v in pp.certs.items()},
        "sa": asdict(pp.service_account), "token": pp.bootstrap_token, "extra": pp.extra}, indent=1))
    return pp


def client_tls_dir(plan: Plan, paths: Paths) -> Path:
    """ca.crt, client.crt, client.key of the operator's etcd client certificate (0600)."""
    pp = ensure_pki(plan, paths)
    d = _private_dir(home(paths) / "etcd-client")
    for name, text in (("ca.crt", pp.cas["etcd"].cert_pem), ("client.crt", pp.certs["etcd-admin-client"].cert_pem),
                       ("client.key", pp.certs["etcd-admin-client"].key_pem)):
        write_private(d / name, text)
    return d


def etcd_pki(pp: certs.PlanPki, member: Member) -> cloud_init.EtcdPki:
    return cloud_init.EtcdPki.issued(pp, member.name)


def apiserver_pki(pp: certs.PlanPki, member: Member) -> cloud_init.ApiServerPki:
    return cloud_init.ApiServerPki.issued(pp, member.name)


def user_data(plan: Plan, pp: certs.PlanPki, kubernetes_repo: str | None,
              backup_url: str | None = None) -> dict[str, str]:
    """Host name -> user-data for every control-plane member, given the package repository they install from.

    `backup_url`: the snapshot container the members' timer uploads to with their managed identity,
    as the Azure stack passes it. The lab passes none (its nodes have no Azure identity), so its
    members boot without that timer; the test that compares bytes with the stack passes the stack's."""
    out: dict[str, str] = {}
    for m in plan.members if kubernetes_repo else []:
        if m.role == "apiserver":
            out[m.name] = cloud_init.apiserver(plan, m, apiserver_pki(pp, m), kubernetes_repo=kubernetes_repo)
        else:
            out[m.name] = cloud_init.etcd(plan, m, etcd_pki(pp, m), kubernetes_repo=kubernetes_repo,
                                          backup_url=backup_url)
    return out


def write_seeds(plan: Plan, paths: Paths, out: Path | None = None) -> Path:
    """Write `<host>.yaml` user-data (it holds private keys: 0600) for `lab up --seed-dir`; return the directory."""
    d = _private_dir(out or home(paths) / "seeds")
    for host, text in user_data(plan, ensure_pki(plan, paths), plan.env.mirrors.kubernetes).items():
        write_private(d / f"{host}.yaml", text)
    return d


def read_seeds(seed_dir: Path | None) -> dict[str, str]:
    """`<dir>/<host>.yaml` is that host's cloud-init user-data (what `write_seeds` wrote, or the operator's own)."""
    if seed_dir is None:
        return {}
    if not seed_dir.is_dir():
        raise InputError([Problem(str(seed_dir), "", "not a directory of <host>.yaml user-data files")])
    return {p.stem: p.read_text() for p in sorted(seed_dir.glob("*.yaml"))}


# ----------------------------------------------------------------------------- the backup container (Azurite)


def backups_configured(plan: Plan) -> bool:
    """A lab environment that spells out `backups:` gets its Blob endpoint (Azurite) from `lab up`."""
    return "backups" in plan.env.model_fields_set


def start_azurite(plan: Plan, paths: Paths, say=print) -> int:
    """Run Azurite on the lab host's bridge address (nodes and the host reach it; nothing else does)."""
    assert plan.env.lab is not None
    _private_dir(home(paths))
    a = azurite.start(str(plan.env.lab.host_ip), azurite.PORT, home(paths) / "azurite", paths.log_dir / "azurite.log")
    say(f"backup container endpoint (Azurite) on {a.url} (pid {a.pid})")
    return a.pid
