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

The lab's environment file must name exactly these URLs (`expected_mirrors`), so the
control plane's user-data and the roles install from them as they would from a real site.
The registry serves plain HTTP on the private bridge only; see docs/lab.md.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import build, daemon
from ..build import debs, images
from .state import Paths

PROXY_PORT = 3142
REGISTRY_PORT = 5000
PROXY_MARKER = "skyrack.lab.proxy"
REGISTRY_MARKER = "skyrack-lab-registry"


class SiteError(RuntimeError):
    """A mirror of the lab site cannot be started or filled."""


@dataclass(frozen=True)
class Site:
    host_ip: str

    @property
    def proxy(self) -> str:
        return f"http://{self.host_ip}:{PROXY_PORT}"

    @property
    def registry_addr(self) -> str:
        return f"{self.host_ip}:{REGISTRY_PORT}"

    @property
    def registry(self) -> str:
        return f"http://{self.registry_addr}"

    def kubernetes_repo(self, b) -> str:
        return f"{self.proxy}/{debs.repo_path(b)}"


def expected_mirrors(site: Site, b) -> dict[str, str]:
    """What `mirrors:` of a lab environment must say (field -> URL)."""
    return {"apt_proxy": site.proxy, "kubernetes": site.kubernetes_repo(b), "registry": site.registry}


def proxy_alive(pid: int | None) -> bool:
    return daemon.alive(pid, PROXY_MARKER)


def start_proxy(paths: Paths, site: Site, served: dict[str, Path]) -> int:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", PROXY_MARKER, "--listen", f"{site.host_ip}:{PROXY_PORT}", "--cache",
           str(paths.proxy_cache)]
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
  headers:
    X-Content-Type-Options: [nosniff]
"""


def start_registry(paths: Paths, site: Site) -> int:
    storage = paths.root / "registry"
    storage.mkdir(parents=True, exist_ok=True)
    config = paths.root / f"{REGISTRY_MARKER}.yml"
    config.write_text(REGISTRY_CONFIG.format(storage=storage, addr=site.registry_addr))
    return daemon.start(["docker-registry", "serve", str(config)], name="the lab registry",
                        listen=(site.host_ip, REGISTRY_PORT), log=paths.log_dir / "registry.log", timeout=15,
                        error=SiteError)


def fill_registry(paths: Paths, site: Site, artifacts: build.Artifacts) -> list[str]:
    """Push every built image into the registry (skopeo skips blobs it already holds)."""
    try:
        return images.publish(artifacts.oci_layout, artifacts.build, site.registry_addr, paths.log_dir / "registry-fill.log")
    except build.BuildError as exc:
        raise SiteError(str(exc)) from None
