"""What an air-gapped site downloads, built from source for the lab: Kubernetes, its packages, its images.

`ensure(build, suite, say)` returns every artifact, building (once, cached under
`/var/cache/skyrack/build/`) what is missing: the binaries (`kubernetes.py`), the signed apt
repository of kubeadm, kubelet, kubectl, containerd and etcd (`debs.py`), and the OCI images of the control
plane, kube-proxy, CoreDNS and pause (`images.py`). `report()` says what is
cached. The lab serves them from its own mirrors (skyrack.lab.mirrors_host). The Pulumi
engine the stacks run on (`pulumi.py`) is built beside them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .. import upstream
from ..upstream import KubernetesBuild
from . import debs, images, pulumi
from . import kubernetes as k8s
from .cache import ROOT, BuildError, Say, fmt_seconds

__all__ = ["Artifacts", "BuildError", "ensure", "report"]


@dataclass(frozen=True)
class Artifacts:
    build: KubernetesBuild
    binaries: k8s.Binaries
    apt_repo: Path  # the flat repository directory (Release.key, InRelease, Packages, *.deb)
    oci_layout: Path  # one OCI layout with every image (images.layout_tag names them)
    engine: pulumi.Engine  # the Pulumi CLI and language host the stacks run on (and the Kubernetes provider)


def ensure(b: KubernetesBuild, suite: str, say: Say = print, *, kubernetes_provider: bool = True) -> Artifacts:
    """`kubernetes_provider=False`: the engine without the Kubernetes provider, what `lab up` needs (the
    cluster layer's `pulumi up` needs the provider): the site's part of the build, whose tests start while the
    provider builds (`./dev test`)."""
    bins = k8s.all_binaries(b, say)
    return Artifacts(b, bins, debs.repository(b, bins, say), images.build(b, bins, suite, say),
                     pulumi.engine(upstream.PULUMI, say, kubernetes=kubernetes_provider))


def report(root: Path = ROOT) -> list[dict]:
    """Every cached build entry: component, version, size, how long it took."""
    out = []
    for meta in sorted((root / "build").glob("*/*/meta.json")):
        m = json.loads(meta.read_text())
        out.append({"component": m["component"], "version": m["version"], "path": str(meta.parent),
                    "mib": round(m["bytes"] / 2**20), "built_in": fmt_seconds(m["seconds"])})
    return out
