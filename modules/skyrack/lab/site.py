"""The lab as an air-gapped site: the mirrors its host serves to the nodes, as a real site's do.

A rack has no internet; its site runs an apt proxy, a Kubernetes package repository and a
container registry mirror, and the environment file names them (`mirrors:`). The lab host
is such a site, on its bridge address:

* the **apt proxy** (`skyrack.lab.proxy`, port 3142) forwards to this host's Debian mirrors
  and serves the **Kubernetes apt repository** that skyrack.build made, under
  `/kubernetes/core:/stable:/v1.<minor>/deb/` (pkgs.k8s.io's layout);
* the **registry** (Debian's `docker-registry`, the CNCF distribution registry, port 5000)
  holds the images skyrack.build assembled under their upstream names
  (`<registry>/registry.k8s.io/kube-apiserver:v1.37.2`), which nodes reach through
  containerd's `hosts.toml` mirror configuration.

Both serve **HTTPS only**, with a certificate for the bridge address signed by the **lab's site
CA** (`SITE_CA`, made once per machine by `ensure_ca`, its key readable by root only), which the
environment names in `mirrors.ca` like any site's CA: nodes trust it through the same user-data
and roles as production, and a machine without it refuses the mirrors.

The lab's environment file must name exactly these URLs and this CA (`expected_mirrors`), so the
control plane's user-data and the roles install from them as they would from a real site.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import build, daemon, files, pki
from ..build import debs, images
from .state import STATE_ROOT, Paths

PROXY_PORT = 3142
REGISTRY_PORT = 5000
PROXY_MARKER = "skyrack.lab.proxy"
REGISTRY_MARKER = "skyrack-lab-registry"
# The lab's site CA, shared by every lab on this machine (one per bridge): configs/lab.yaml names SITE_CA.
SITE_CA_DIR = STATE_ROOT / "site-ca"
SITE_CA = SITE_CA_DIR / "ca.crt"
SITE_CA_KEY = SITE_CA_DIR / "private" / "ca.key"  # not beside ca.crt: skopeo's --cert-dir reads every *.key there
CA_RENEW_DAYS = 365  # a CA with less left than this is replaced (the labs using it get the new one at `lab up`)


class SiteError(RuntimeError):
    """A mirror of the lab site cannot be started or filled."""


@dataclass(frozen=True)
class Site:
    host_ip: str

    @property
    def proxy(self) -> str:
        return f"https://{self.host_ip}:{PROXY_PORT}"

    @property
    def registry_addr(self) -> str:
        return f"{self.host_ip}:{REGISTRY_PORT}"

    @property
    def registry(self) -> str:
        return f"https://{self.registry_addr}"

    def kubernetes_repo(self, b) -> str:
        return f"{self.proxy}/{debs.repo_path(b)}"


def expected_mirrors(site: Site, b) -> dict[str, str]:
    """What `mirrors:` of a lab environment must say (field -> URL)."""
    return {"apt_proxy": site.proxy, "kubernetes": site.kubernetes_repo(b), "registry": site.registry}


def ensure_ca(now: dt.datetime | None = None) -> Path:
    """The lab's site CA: made once per machine, replaced when less than a year is left. Returns its path."""
    now = now or dt.datetime.now(dt.UTC)
    SITE_CA_KEY.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with (SITE_CA_DIR / ".lock").open("w") as lock:  # two labs starting at once make one CA
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            cert = pki.load_cert(SITE_CA.read_text())
            if SITE_CA_KEY.is_file() and cert.not_valid_after_utc - now > dt.timedelta(days=CA_RENEW_DAYS):
                return SITE_CA
        except (OSError, ValueError):
            pass
        ca = pki.create_ca("skyrack lab site CA", now=now)
        files.atomic_write(SITE_CA_KEY, ca.key_pem, mode=0o600)
        files.atomic_write(SITE_CA, ca.cert_pem)
    return SITE_CA


def lab_ca() -> str | None:
    """The lab's site CA as `mirrors.ca` holds it (checked, normalised PEM), or None without one."""
    try:
        return pki.ca_bundle(SITE_CA.read_text())
    except (OSError, ValueError):
        return None


def server_tls(paths: Paths, site: Site) -> tuple[Path, Path]:
    """A certificate for the bridge address, from the lab's site CA, for the proxy and the registry: issued
    at each start (a second), so it always matches the CA and the address. (certificate, key) paths."""
    ca = pki.Issued(ensure_ca().read_text(), SITE_CA_KEY.read_text())
    tls = pki.issue(ca, f"skyrack lab site {site.host_ip}", ips=[site.host_ip], server=True, days=365)
    d = paths.root / "site-tls"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    files.atomic_write(d / "tls.key", tls.key_pem, mode=0o600)
    files.atomic_write(d / "tls.crt", tls.cert_pem + ca.cert_pem)  # the chain, leaf first
    return d / "tls.crt", d / "tls.key"


def proxy_alive(pid: int | None) -> bool:
    return daemon.alive(pid, PROXY_MARKER)


def start_proxy(paths: Paths, site: Site, served: dict[str, Path]) -> int:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cert, key = server_tls(paths, site)
    cmd = [sys.executable, "-m", PROXY_MARKER, "--listen", f"{site.host_ip}:{PROXY_PORT}", "--cache",
           str(paths.proxy_cache), "--tls-cert", str(cert), "--tls-key", str(key)]
    for prefix, directory in served.items():
        cmd += ["--serve", f"/{prefix}={directory}"]
    return daemon.start(cmd, name="the apt proxy", listen=(site.host_ip, PROXY_PORT),
                        log=paths.log_dir / "apt-proxy.log", timeout=10, error=SiteError, env=env)


def registry_alive(pid: int | None) -> bool:
    return daemon.alive(pid, REGISTRY_MARKER)


REGISTRY_CONFIG = """\
# skyrack lab: the site's container registry (Debian's docker-registry), on the lab bridge only.
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: false
http:
  addr: {addr}
  tls:
    certificate: {cert}
    key: {key}
    minimumtls: tls1.2
  headers:
    X-Content-Type-Options: [nosniff]
"""


def start_registry(paths: Paths, site: Site) -> int:
    storage = paths.root / "registry"
    storage.mkdir(parents=True, exist_ok=True)
    config = paths.root / f"{REGISTRY_MARKER}.yml"
    cert, key = server_tls(paths, site)
    config.write_text(REGISTRY_CONFIG.format(storage=storage, addr=site.registry_addr, cert=cert, key=key))
    return daemon.start(["docker-registry", "serve", str(config)], name="the lab registry",
                        listen=(site.host_ip, REGISTRY_PORT), log=paths.log_dir / "registry.log", timeout=15,
                        error=SiteError)


def fill_registry(paths: Paths, site: Site, artifacts: build.Artifacts) -> list[str]:
    """Push every built image into the registry (skopeo skips blobs it already holds)."""
    try:
        return images.publish(artifacts.oci_layout, artifacts.build, site.registry_addr, paths.log_dir / "registry-fill.log",
                              ca_dir=SITE_CA_DIR)
    except build.BuildError as exc:
        raise SiteError(str(exc)) from None


def push_images(paths: Paths, site: Site, layout: Path, refs: dict[str, str]) -> list[str]:
    """Push more images (the layout's tag -> upstream reference) into the running registry, as fill_registry."""
    try:
        return images.push(layout, refs, site.registry_addr, paths.log_dir / "registry-fill.log", ca_dir=SITE_CA_DIR)
    except build.BuildError as exc:
        raise SiteError(str(exc)) from None


if __name__ == "__main__":  # ./dev setup: the lab's site CA exists before configs/lab.yaml is first read
    print(f"the lab's site CA: {ensure_ca()}")
