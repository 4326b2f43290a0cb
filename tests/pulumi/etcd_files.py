"""An etcd member's files as its rendered user-data writes them, and stand-in tools to run its scripts with."""

from __future__ import annotations

from pathlib import Path

import yaml

from skyrack import certs
from skyrack import plan as planmod
from skyrack.render import cloud_init

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def member_files(env: str = "dev", index: int = 0) -> tuple[planmod.Plan, planmod.Member, dict[str, str]]:
    """(plan, member, {path: content}) of etcd member `index` of configs/<env>.yaml."""
    plan = planmod.make(CONFIGS / f"{env}.yaml")
    member = plan.members_of("etcd")[index]
    text = cloud_init.etcd(plan, member, cloud_init.EtcdPki.issued(certs.issue_all(plan), member.name),
                           kubernetes_repo="https://pkgs.example.org/kubernetes/")
    return plan, member, {f["path"]: f["content"] for f in yaml.safe_load(text)["write_files"]}


def install(path: Path, text: str) -> Path:
    """Write an executable file (a rendered script, a stand-in tool)."""
    path.write_text(text)
    path.chmod(0o755)
    return path
