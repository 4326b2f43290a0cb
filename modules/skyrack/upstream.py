"""Upstream releases that skyrack builds from source for an air-gapped lab, one entry per Kubernetes version.

A real site downloads Kubernetes; the lab cannot, so `skyrack.build` compiles upstream's own
programs from the Go module proxy and serves them from the lab's own mirrors. A version is
listed here only once its whole set (Kubernetes, CoreDNS, pause, containerd, etcd)
is known to build from what the proxy serves; `validate` refuses any other version for a lab
environment, naming these. Pure data: the core (config validation) and the builder read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class KubernetesBuild:
    version: str  # kubernetes.version, e.g. "1.37.2"
    go: str  # the `go` line of upstream's go.mod (the wrapper module uses the same)
    coredns: str  # the CoreDNS release kubeadm of this minor deploys
    pause: str  # the pause image tag kubeadm of this minor expects
    agnhost: str  # test/images/agnhost/VERSION of this Kubernetes (upstream's e2e image)
    # Staging modules the Go module proxy does not serve at v0.<minor>.<patch>: the nearest
    # earlier patch it serves (a staging module changes little between patches).
    staging_fallbacks: dict[str, str] = field(default_factory=dict)

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])

    @property
    def tag(self) -> str:
        return f"v{self.version}"

    def images(self, registry: str = "registry.k8s.io") -> dict[str, str]:
        """The image references a cluster of this version runs, under upstream's registry names."""
        return {
            "kube-apiserver": f"{registry}/kube-apiserver:{self.tag}",
            "kube-controller-manager": f"{registry}/kube-controller-manager:{self.tag}",
            "kube-scheduler": f"{registry}/kube-scheduler:{self.tag}",
            "kube-proxy": f"{registry}/kube-proxy:{self.tag}",
            "coredns": f"{registry}/coredns/coredns:{self.coredns}",
            "pause": f"{registry}/pause:{self.pause}",
            "agnhost": f"{registry}/e2e-test-images/agnhost:{self.agnhost}",
            "prometheus": PROMETHEUS_IMAGE,
        }


def prometheus_release(module_version: str) -> str:
    """Prometheus' release for its Go module's version, as the project tags its module: 2.x as
    `v0.<minor>.<patch>` (v0.55.1 is 2.55.1), 3.x on as `v0.<major><minor:02>.<patch>` (v0.316.0 is 3.16.0)."""
    _, minor, patch = (int(n) for n in module_version.lstrip("v").split("."))
    return f"{minor // 100}.{minor % 100}.{patch}" if minor >= 300 else f"2.{minor}.{patch}"


# The cluster layer's monitoring. Debian 12's prometheus package is built without Kubernetes service
# discovery (its config refuses `kubernetes_sd_configs`), so the site's image is built from Prometheus' Go
# module like the other programs, with only the file, HTTP and Kubernetes discovery compiled in.
PROMETHEUS_MODULE_VERSION = "v0.316.0"
PROMETHEUS_GO = "1.26.7"
PROMETHEUS_IMAGE = f"quay.io/prometheus/prometheus:v{prometheus_release(PROMETHEUS_MODULE_VERSION)}"

# KWOK, the simulated fleet's controller (the lab's fleet test and bench/fleet_scale.py): fake Nodes that
# hold leases and report status like kubelets, and pods on them that run without containers.
KWOK_VERSION = "v0.8.0"

KUBERNETES_BUILDS: dict[str, KubernetesBuild] = {
    b.version: b
    for b in (
        KubernetesBuild(version="1.37.2", go="1.26.0", coredns="v1.14.6", pause="3.10.2", agnhost="2.66.1"),
        # the minor before: the cluster an upgrade starts from (bench/upgrade.py); not built by `./dev test`
        KubernetesBuild(version="1.36.3", go="1.26.0", coredns="v1.14.2", pause="3.10.2", agnhost="2.63.0"),
    )
}


# Receptor (the mesh AWX hands runs over), for `skyrack join --via receptor`: built from its Go module
# (`cmd/receptor-cl`, a go.mod without replaces). v1.4.4 is the newest release the module proxy here serves
# with a checksum-database entry; receptorctl (PyPI) of the same minor speaks its control protocol.
RECEPTOR_VERSION = "v1.4.4"
RECEPTOR_GO = "1.21"  # the `go` line of its go.mod

# The container runtime every node runs. Kubernetes 1.36 and later support containerd 2.x only (1.35 was
# the last release for containerd 1.x, and Debian 12's 1.6 is out of containerd's own support), so the
# site's Kubernetes repository serves containerd built from its Go module, as it serves kubelet.
# containerd 2.4 still runs on cgroup v1 hosts (its RELEASES.md: cgroup v1 kept on a branch until 2029).
CONTAINERD_VERSION = "v2.4.2"
CONTAINERD_GO = "1.26.6"

# etcd for the etcd VMs, from the site's Kubernetes repository too: kubeadm 1.37 refuses an external etcd
# older than 3.5.24 (MinExternalEtcdVersion), and Debian 12's is 3.4.23. 3.6 is the newest stable minor
# kubeadm 1.36 and 1.37 both support; these are its three modules' releases (server, etcdctl, etcdutl).
ETCD_VERSION = "v3.6.16"
ETCD_GO = "1.26.0"


def known_versions() -> str:
    return ", ".join(sorted(KUBERNETES_BUILDS))


@dataclass(frozen=True)
class PulumiBuild:
    """The Pulumi engine the stacks run on, built from its Go modules (pyproject.toml pins the same SDKs).

    The CLI is the release of the Python SDK (`pulumi==version`). The Python language host has
    no release tags of its own: it is built at the newest commit the Go module proxy serves
    (`language_python`, with the pkg/sdk release of that commit), and runs the SDK's own
    `pulumi-language-python-exec` of `version`. The Kubernetes provider is the release of
    the Python SDK `pulumi-kubernetes==kubernetes`, at that release's commit.
    """

    version: str  # github.com/pulumi/pulumi/{pkg,sdk}/v3 and the Python SDK
    go: str  # the `go` line of pkg/v3's go.mod
    language_python: str  # pseudo-version of github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3
    language_python_release: str  # the pkg/sdk release at that commit
    # The checksum database does not know that pseudo-version, so its go.sum lines are pinned here:
    # checked against upstream's git tree at the commit (the module zip's hash, LICENSE included).
    language_python_sums: tuple[str, str]  # (h1 of the module zip, h1 of its go.mod)
    kubernetes: str  # the pulumi-kubernetes release (Python SDK and provider)
    kubernetes_provider: str  # pseudo-version of github.com/pulumi/pulumi-kubernetes/provider/v4 at that release
    kubernetes_go: str  # the `go` line of the provider's go.mod

    @property
    def tag(self) -> str:
        return f"v{self.version}"


PULUMI = PulumiBuild(version="3.260.0", go="1.26.6",
                     language_python="v3.0.0-20250718110245-a8f88047ab64", language_python_release="3.184.0",
                     language_python_sums=("h1:3x/gafIPQwk/G6nK5rN9ssW4KXAQMFQypC30PlTigzM=",
                                           "h1:FHCsy+aAJdr+phX5jpdRdvedlCBI2osMos828Pbze7c="),
                     kubernetes="4.25.0", kubernetes_provider="v4.0.0-20260115033456-f47bc2d6f199",
                     kubernetes_go="1.24.7")
