"""Every control-plane user-data skyrack renders passes cloud-init's validator and the top-level key check,
and the lab seeds exactly what the Azure stack passes as custom data (same function, same bytes)."""

from __future__ import annotations

import stat

import pytest
import yaml
from etcdlab import write_env

from skyrack import plan as planmod
from skyrack.lab import controlplane
from skyrack.lab.state import Paths
from skyrack.render import cloud_init

MIRROR = "http://198.18.0.1:8080/kubernetes/v1.31/deb/"  # any repository URL: the text is only validated here


@pytest.fixture(scope="module")
def checker(userdata_checker):
    return userdata_checker


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    """configs/lab.yaml's shape with 3 and 5 members, with and without the events cluster."""
    d = tmp_path_factory.mktemp("variants")
    return [planmod.make(write_env(d, f"v{n}{'e' if ev else ''}", "skyetcd9", 9, n, ev))
            for n, ev in ((3, False), (3, True), (5, True))]


def rendered(plan, tmp_path):
    paths = Paths(tmp_path / plan.env.name)
    return controlplane.user_data(plan, controlplane.ensure_pki(plan, paths), MIRROR)


def test_every_rendered_user_data_is_valid(checker, variants, tmp_path):
    for plan in variants[1:]:  # 3 and 5 members with the events cluster: every role and template branch
        data = rendered(plan, tmp_path)
        roles = {m.role for m in plan.members}
        assert set(data) == {m.name for m in plan.members}, "every member, API servers included, has user-data"
        assert len(plan.members_of("etcd")) in (3, 5)
        assert ("etcd-events" in roles) == plan.env.control_plane.etcd.events_cluster
        bad = [r for r in checker.check_all(data) if not r.ok]
        assert not bad, [(r.name, r.problems) for r in bad]


@pytest.mark.parametrize("text,expect", [
    ("#cloud-config\npackages: [etcd-server]\nwrite_file:\n  - path: /x\n", "unknown top-level key 'write_file'"),
    ("#cloud-config\npackages: 5\n", "packages"),
    ("packages: [etcd-server]\n", "#cloud-config"),
    ("#cloud-config\nwrite_files:\n  - content: x\n", "path"),
])
def test_the_check_catches_what_boot_would_ignore(checker, text, expect):
    result = checker.check("bad.yaml", text)
    assert not result.ok
    assert any(expect in p for p in result.problems), result.problems


def test_etcd_user_data_carries_the_plans_flags(variants, tmp_path):
    plan = variants[2]
    data = rendered(plan, tmp_path)
    for m in plan.members:
        if m.role == "apiserver":
            continue
        doc = yaml.safe_load(data[m.name])
        unit = next(f["content"] for f in doc["write_files"] if f["path"].endswith("skyrack-etcd.service"))
        quota = plan.env.control_plane.etcd.quota_backend_gib * 1024**3
        assert f"--quota-backend-bytes={quota}" in unit
        assert f"--data-dir=/var/lib/etcd/{m.role}" in unit
        peers = ",".join(f"{p.name}=https://{p.ip}:2380" for p in plan.members_of(m.role))
        assert f"--initial-cluster={peers}" in unit, "a member's peers are its own cluster's members only"
        for flag in ("--client-cert-auth", "--peer-client-cert-auth"):
            assert flag in unit


def test_lab_seeds_are_the_azure_renderers_output(variants, tmp_path, monkeypatch):
    """The lab calls render.cloud_init's functions, unwrapped, and seeds their bytes unchanged."""
    plan = variants[1]
    calls: dict[str, str] = {}
    real_etcd, real_api = cloud_init.etcd, cloud_init.apiserver

    def spy_etcd(plan_, member, pki, **kw):
        calls[member.name] = real_etcd(plan_, member, pki, **kw)
        return calls[member.name]

    def spy_api(plan_, member, pki, **kw):
        calls[member.name] = real_api(plan_, member, pki, **kw)
        return calls[member.name]

    monkeypatch.setattr(cloud_init, "etcd", spy_etcd)
    monkeypatch.setattr(cloud_init, "apiserver", spy_api)
    paths = Paths(tmp_path / "lab")
    plan_k = plan.__class__(**{**plan.__dict__, "env": plan.env.model_copy(
        update={"mirrors": plan.env.mirrors.model_copy(update={"kubernetes": MIRROR})})})
    seeds = controlplane.write_seeds(plan_k, paths)
    assert set(calls) == {m.name for m in plan.members}
    for name, text in calls.items():
        assert (seeds / f"{name}.yaml").read_bytes() == text.encode()
    # Re-rendering with the stored certificates gives the same bytes: the Pulumi stack,
    # handed the same certificates, passes exactly this text as custom data.
    pp = controlplane.ensure_pki(plan_k, paths)
    for m in plan.members_of("etcd"):
        text = real_etcd(plan_k, m, controlplane.etcd_pki(pp, m), kubernetes_repo=MIRROR)
        assert text.encode() == (seeds / f"{m.name}.yaml").read_bytes()


def test_secrets_are_root_only(variants, tmp_path):
    plan = variants[0]
    paths = Paths(tmp_path / "lab")
    seeds = controlplane.write_seeds(plan, paths)
    tls = controlplane.client_tls_dir(plan, paths)
    for d in (controlplane.home(paths), seeds, tls):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in [*seeds.iterdir(), *tls.iterdir(), controlplane.home(paths) / "pki.json"]:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert "PRIVATE KEY" in (seeds / "etcd-0.yaml").read_text()


def test_the_lab_renders_with_the_plans_data_disk(variants, tmp_path):
    """A lab environment keeps etcd's data on the node's disk; Azure's look for local NVMe (same function)."""
    plan = variants[0]
    pp = controlplane.ensure_pki(plan, Paths(tmp_path / "lab"))
    m = plan.members_of("etcd")[0]
    repo = plan.env.mirrors.kubernetes or "https://198.18.0.1:3142/kubernetes/core:/stable:/v1.37/deb/"
    lab_text = cloud_init.etcd(plan, m, controlplane.etcd_pki(pp, m), kubernetes_repo=repo)
    assert "nvme" not in lab_text
    assert lab_text == cloud_init.etcd(plan, m, controlplane.etcd_pki(pp, m), kubernetes_repo=repo, data_disk="rootfs")
    assert "nvme" in cloud_init.etcd(plan, m, controlplane.etcd_pki(pp, m), kubernetes_repo=repo, data_disk="local")
