"""`mirrors.ca`: the site's CA, checked once where the file is read and trusted by every machine before any fetch.

The lab proves the whole path on real nodes (tests/lab/test_lab.py: HTTPS mirrors that a node without the
CA refuses); here: what the file may say, what `check` and `diff` make of it, and what every consumer
renders from it (cloud-init on VMs, the os_baseline and container_runtime roles on rack nodes).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from skyrack import certs, inventory, pki
from skyrack import plan as planmod
from skyrack.render import cloud_init
from support import CONFIGS, rejects, run_cli
from userdata_check import cloud_init_root

ROOT = CONFIGS.parent
CA = pki.create_ca("test site CA")


def write(tmp_path: Path, mutate, base: str = "prod") -> Path:
    data = yaml.safe_load((CONFIGS / f"{base}.yaml").read_text())
    mutate(data["mirrors"])
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    for beside in (f"{base}.lock.yaml", "prod-site-ca.pem"):  # its lock, and the CA prod names relatively
        (tmp_path / beside).write_text((CONFIGS / beside).read_text())
    return path


def test_inline_pem_and_a_file_beside_the_environment_load_the_same_bundle(tmp_path: Path) -> None:
    (tmp_path / "site-ca.pem").write_text(CA.cert_pem)
    inline = planmod.make(write(tmp_path / "a", lambda m: m.update(ca=CA.cert_pem)))
    by_file = planmod.make(write(tmp_path, lambda m: m.update(ca="site-ca.pem")))
    assert inline.env.mirrors.ca == by_file.env.mirrors.ca == CA.cert_pem
    # prod ships a placeholder beside it, named relatively: the file is read, never the name rendered
    prod = planmod.make(CONFIGS / "prod.yaml")
    assert prod.env.mirrors.ca == (CONFIGS / "prod-site-ca.pem").read_text()


@pytest.mark.parametrize(("ca", "fragment"), [
    ("two\nlines", "mirrors.ca: 'two\\nlines' is neither PEM text nor a file's path"),
    (CA.key_pem, "block 1 is a private key, not a certificate (a private key never goes here)"),
    (CA.cert_pem + "trailing words\n", "not PEM certificates (expected only -----BEGIN CERTIFICATE----- blocks)"),
    ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "does not decode as an X.509 certificate"),
    (pki.issue(CA, "mirror.lab.internal", server=True).cert_pem, "'CN=mirror.lab.internal' is not a CA certificate"),
    (pki.create_ca("old CA", days=30, now=dt.datetime(2020, 1, 1, tzinfo=dt.UTC)).cert_pem,
     "'CN=old CA' expired on 2020-01-30"),
    ("missing.pem", "missing.pem: no such file"),
    ("/var/lib/skyrack/lab/no-such-ca.crt", "no such file (the lab's site CA: `skyrack lab up` or `./dev setup` creates it)"),
    (["a list"], "mirrors.ca: "),
])
def test_a_bad_ca_is_one_clear_error(tmp_path: Path, ca, fragment: str) -> None:
    rejects(write(tmp_path, lambda m: m.update(ca=ca)), "prod.yaml: mirrors.ca: ", fragment)


def test_a_ca_file_that_is_a_directory_or_too_large_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dir.pem").mkdir()
    rejects(write(tmp_path, lambda m: m.update(ca="dir.pem")), "dir.pem: cannot be read as PEM text")
    (tmp_path / "big.pem").write_text(CA.cert_pem * 200)
    rejects(write(tmp_path, lambda m: m.update(ca="big.pem")), "big.pem: larger than 64 KiB")


@pytest.mark.parametrize("url", ["https://pkgs-mirror.lab.internal/k8s/", "https://10.64.0.2:3142",
                                 "https://mirror/k8s/"])
def test_an_https_mirror_no_public_ca_can_certify_needs_the_sites_ca(tmp_path: Path, url: str) -> None:
    def mutate(m):
        m.pop("ca")
        m.update(apt_proxy=None, kubernetes=url if url.endswith("/") else None,
                 registry=None if url.endswith("/") else url)
    field = "kubernetes" if url.endswith("/") else "registry"
    rejects(write(tmp_path, mutate), f"mirrors.{field}: {url}: ", "mirrors.ca is not set")


def test_an_https_mirror_under_a_public_name_needs_no_site_ca(tmp_path: Path) -> None:
    def mutate(m):
        m.pop("ca")
        m.update(apt_proxy=None, kubernetes="https://pkgs.k8s.io/core:/stable:/v1.37/deb/")
    assert run_cli("validate", str(write(tmp_path, mutate))).returncode == 0


def test_check_refuses_plain_http_mirrors_in_production_and_warns_elsewhere(tmp_path: Path) -> None:
    path = write(tmp_path, lambda m: m.update(apt_proxy="http://apt-proxy.lab.internal:3142"))
    proc = run_cli("check", str(path))
    assert proc.returncode == 1
    assert "mirrors-https: mirrors.apt_proxy: http://apt-proxy.lab.internal:3142 is plain HTTP" in proc.stdout
    assert "1 error(s)" in proc.stdout
    data = yaml.safe_load(path.read_text())
    data["tier"] = "dev"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli("check", str(path))
    assert "warning mirrors-https: mirrors.apt_proxy" in proc.stdout and "0 error(s)" in proc.stdout, proc.stdout
    for shipped in ("prod", "lab"):  # every shipped mirror is HTTPS
        assert "mirrors-https" not in run_cli("check", f"configs/{shipped}.yaml").stdout


def _cloud_cfg_stages() -> dict[str, list[str]]:
    unpacked = cloud_init_root().parents[3]  # <cache>/usr/lib/python3/dist-packages -> <cache>
    cfg = yaml.safe_load((unpacked / "etc/cloud/cloud.cfg").read_text())
    return {stage: [m if isinstance(m, str) else m[0] for m in cfg[stage]]
            for stage in ("cloud_init_modules", "cloud_config_modules", "cloud_final_modules")}


def test_every_vm_trusts_the_ca_before_its_first_fetch() -> None:
    plan = planmod.make(CONFIGS / "prod.yaml")
    issued = certs.issue_all(plan)
    etcd = plan.members_of("etcd")[0]
    api = plan.members_of("apiserver")[0]
    texts = {"etcd": cloud_init.etcd(plan, etcd, cloud_init.EtcdPki.issued(issued, etcd.name), kubernetes_repo="x"),
             "apiserver": cloud_init.apiserver(plan, api, cloud_init.ApiServerPki.issued(issued, api.name),
                                               kubernetes_repo="x")}
    pool = plan.pools[0]
    texts["pool"] = cloud_init.pool_node(plan, pool, cloud_init.WorkerJoin("abcdef.0123456789abcdef", "sha256:" + "0" * 64),
                                         kubernetes_repo="x")
    for name, text in texts.items():
        config = yaml.safe_load(text)
        assert config["ca_certs"]["trusted"] == [plan.env.mirrors.ca], name
    # cloud-init's ca-certs runs in its init stage; apt's configuration, package installs and every command
    # (the repository key's curl, the bootstrap) run in the stages after it
    stages = _cloud_cfg_stages()
    assert "ca-certs" in stages["cloud_init_modules"]
    assert stages["cloud_init_modules"].index("ca-certs") > stages["cloud_init_modules"].index("bootcmd")
    assert {"apt-configure", "runcmd"} <= set(stages["cloud_config_modules"])
    assert {"package-update-upgrade-install", "scripts-user"} <= set(stages["cloud_final_modules"])
    assert not any("bootcmd" in yaml.safe_load(t) for t in texts.values()), "bootcmd runs before ca-certs"


def test_rack_nodes_trust_the_ca_before_any_fetch_and_containerd_reads_it_at_every_pull() -> None:
    plan = planmod.make(CONFIGS / "prod.yaml")
    assert inventory.global_vars(plan)["skyrack_site_ca"] == plan.env.mirrors.ca
    tasks = yaml.safe_load((ROOT / "ansible/roles/os_baseline/tasks/main.yml").read_text())
    names = [t["name"] for t in tasks]
    trust = names.index("Trust the site's CA")
    fetches = [i for i, t in enumerate(tasks) if "block" in t or {"ansible.builtin.apt", "ansible.builtin.get_url"} & t.keys()]
    assert trust == 0 and tasks[0]["notify"] == "Rebuild the system's CA bundle" and min(fetches) > 1
    assert tasks[1]["ansible.builtin.meta"] == "flush_handlers"
    handlers = yaml.safe_load((ROOT / "ansible/roles/os_baseline/handlers/main.yml").read_text())
    assert {"name": "Rebuild the system's CA bundle", "ansible.builtin.command": "update-ca-certificates",
            "changed_when": True} in handlers
    assert tasks[0]["ansible.builtin.copy"]["content"] == "{{ skyrack_site_ca }}"
    lab = planmod.make(CONFIGS / "lab.yaml")
    _config, hosts = cloud_init.containerd_files(lab)
    assert all('ca = "/etc/ssl/certs/ca-certificates.crt"' in h for h in hosts.values()) and hosts


def test_diff_names_a_ca_change_by_fingerprint_never_its_pem(tmp_path: Path) -> None:
    from skyrack.gitops.compare import compare

    old = planmod.make(CONFIGS / "prod.yaml")
    new = planmod.make(write(tmp_path, lambda m: m.update(ca=CA.cert_pem)))
    [change] = [c for c in compare(old, new) if c.field == "mirrors.ca"]
    assert pki.fingerprint(CA.cert_pem)[:23] in change.message
    assert pki.fingerprint(old.env.mirrors.ca)[:23] in change.message
    assert "BEGIN" not in change.message and change.risk == "caution"
