"""Debian packages of kubeadm, kubelet, kubectl, containerd and etcd, published as a signed apt repository.

The packages carry what upstream's (pkgs.k8s.io) do: the binary, and for kubelet its
systemd unit and kubeadm's drop-in (`10-kubeadm.conf`, which reads
`/var/lib/kubelet/kubeadm-flags.env` and `/etc/default/kubelet`). The repository has
upstream's flat layout (`deb [signed-by=...] <url> /` with `Release.key` beside it), so
the same cloud-init and the same Ansible role install from it as from a site's mirror of
pkgs.k8s.io. It is signed with a key made once for this cache (`gpg`, private part kept
root-only in the cache); nodes fetch `Release.key` from the repository, as they do upstream.

containerd and etcd are there too, as a site serves them beside Kubernetes: Kubernetes 1.36 and
later need containerd 2.x and kubeadm 1.37 an etcd of at least 3.5.24, and Debian 12 has 1.6
and 3.4. Each package keeps Debian's name (containerd, etcd-server, etcd-client) with a higher
version, so a node that has Debian's gets this one by an upgrade.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .. import upstream
from ..upstream import KubernetesBuild
from .cache import ROOT, BuildError, Entry, Say, ensure, locked
from .kubernetes import Binaries

RECIPE_VERSION = 3
# as upstream's kubelet package does: the unit is enabled on install, so kubelet (and with it every
# static pod of an API server) comes back after a reboot
KUBELET_POSTINST = """\
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
    systemctl enable kubelet.service >/dev/null 2>&1 || true
fi
"""
KUBELET_UNIT = """\
[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""
# upstream's kubeadm drop-in for the kubelet unit, as pkgs.k8s.io ships it
KUBEADM_DROPIN = """\
# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \\
--kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user
# should use the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS
# should be sourced from this file.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""
# containerd's own unit (containerd.service in its repository), with the binaries in /usr/bin
CONTAINERD_UNIT = """\
[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
"""
CONTAINERD_POSTINST = """\
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
    systemctl enable containerd.service >/dev/null 2>&1 || true
    systemctl try-restart containerd.service >/dev/null 2>&1 || true
fi
"""
# the etcd user the skyrack-etcd unit runs as (Debian's etcd-server makes the same one); no unit: the
# etcd VMs' own skyrack-etcd.service runs etcd with the member's flags
ETCD_POSTINST = """\
#!/bin/sh
set -e
if [ "$1" = configure ] && ! getent passwd etcd >/dev/null; then
    adduser --system --group --quiet --home /var/lib/etcd --no-create-home etcd
fi
"""


@dataclass(frozen=True)
class Package:
    binaries: tuple[str, ...]
    depends: str
    description: str
    homepage: str
    upstream: str  # what it is built from, for the description
    files: dict[str, str] = field(default_factory=dict)  # path -> content
    postinst: str = ""
    conflicts: str = ""


PACKAGES = {
    "kubelet": Package(("kubelet",), "iptables, iproute2, mount, util-linux, conntrack, ethtool, socat",
                       "Node agent for Kubernetes clusters", "https://kubernetes.io", "k8s.io/kubernetes",
                       {"usr/lib/systemd/system/kubelet.service": KUBELET_UNIT,
                        "usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": KUBEADM_DROPIN,
                        "etc/kubernetes/manifests/": ""}, KUBELET_POSTINST),
    "kubeadm": Package(("kubeadm",), "kubelet, kubectl", "Command-line utility for administering a Kubernetes cluster",
                       "https://kubernetes.io", "k8s.io/kubernetes"),
    "kubectl": Package(("kubectl",), "", "Command-line utility for interacting with a Kubernetes cluster",
                       "https://kubernetes.io", "k8s.io/kubernetes"),
    # Debian's containerd 1.6 has the same name: apt upgrades it to this one
    "containerd": Package(("containerd", "containerd-shim-runc-v2", "ctr"), "runc (>= 1.1)",
                          "Open and reliable container runtime", "https://containerd.io",
                          "github.com/containerd/containerd/v2",
                          {"usr/lib/systemd/system/containerd.service": CONTAINERD_UNIT}, CONTAINERD_POSTINST,
                          conflicts="containerd.io"),
    "etcd-server": Package(("etcd",), "adduser", "Highly-available key value store (server)", "https://etcd.io",
                           "go.etcd.io/etcd/server/v3", postinst=ETCD_POSTINST),
    "etcd-client": Package(("etcdctl", "etcdutl"), "", "Highly-available key value store (clients)",
                           "https://etcd.io", "go.etcd.io/etcd/etcdctl/v3 and etcdutl/v3"),
}


def package_version(name: str, b: KubernetesBuild) -> str:
    """The Debian version of a package: its upstream release, revision 1.1 as pkgs.k8s.io numbers them."""
    release = {"containerd": upstream.CONTAINERD_VERSION, "etcd-server": upstream.ETCD_VERSION,
               "etcd-client": upstream.ETCD_VERSION}.get(name, b.tag)
    return f"{release.lstrip('v')}-1.1"


def _run(cmd: list[str], log, what: str, **kw) -> subprocess.CompletedProcess:
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    proc = subprocess.run(cmd, stdout=kw.pop("stdout", log), stderr=log, check=False, **kw)
    if proc.returncode != 0:
        raise BuildError(f"kubernetes apt repository: {what} failed; see {log.name}")
    return proc


def _deb(name: str, b: KubernetesBuild, bins: Binaries, work: Path, out: Path, log) -> None:
    pkg, version = PACKAGES[name], package_version(name, b)
    root = work / name
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    for binary in pkg.binaries:
        shutil.copy2(bins.path(binary), root / "usr/bin" / binary)
    for path, content in pkg.files.items():
        target = root / path
        if path.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    if pkg.postinst:
        postinst = root / "DEBIAN/postinst"
        postinst.write_text(pkg.postinst)
        postinst.chmod(0o755)
    control = [f"Package: {name}", f"Version: {version}", "Architecture: amd64",
               "Maintainer: skyrack lab <skyrack-lab@invalid>", "Section: admin", "Priority: optional",
               f"Homepage: {pkg.homepage}"]
    if pkg.depends:
        control.append(f"Depends: {pkg.depends}")
    if pkg.conflicts:
        control.append(f"Conflicts: {pkg.conflicts}")
    control.append(f"Description: {pkg.description}\n Built from {pkg.upstream} by skyrack for an air-gapped lab.")
    (root / "DEBIAN/control").write_text("\n".join(control) + "\n")
    _run(["dpkg-deb", "--root-owner-group", "-Zxz", "-z1", "--build", str(root), str(out / f"{name}_{version}_amd64.deb")],
         log, f"dpkg-deb {name}")
    shutil.rmtree(root)


@contextmanager
def _agent_stopped(home: Path) -> Iterator[None]:
    """gpg starts an agent for the home directory's secret key and leaves it running: stop it when done (a
    build leaves no daemon behind)."""
    try:
        yield
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)


def signing_home(root: Path = ROOT) -> Path:
    """The lab repository's signing key (made once, root-only). Two builds at once (`./dev test` builds in the
    background while a test asks for the engine) make it one after the other, never over each other."""
    home = root / "build" / "apt-signing-key"

    def made() -> bool:
        return (home / "pubring.kbx").exists() and any((home / "private-keys-v1.d").glob("*.key"))

    if made():
        return home
    with locked(root / "build" / ".apt-signing-key.lock"):
        if not made():
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir(mode=0o700, parents=True)
            with _agent_stopped(home):
                subprocess.run(["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase",
                                "", "--quick-gen-key", "skyrack lab Kubernetes repository <skyrack-lab@invalid>",
                                "ed25519", "sign", "never"], check=True, capture_output=True)
    return home


def repository(b: KubernetesBuild, bins: Binaries, say: Say) -> Path:
    """`<entry>/repo/`: the flat, signed apt repository (Packages, Release, InRelease, Release.key, the .debs)."""
    home = signing_home()
    fpr = subprocess.run(["gpg", "--homedir", str(home), "--with-colons", "--list-keys"], capture_output=True,
                         text=True, check=True).stdout
    fingerprint = next(line.split(":")[9] for line in fpr.splitlines() if line.startswith("fpr:"))
    entry = Entry("kubernetes-apt", b.tag, {"recipe": RECIPE_VERSION,
                                            "binaries": [str(bins.kubernetes), str(bins.containerd), str(bins.etcd)],
                                            "packages": {n: package_version(n, b) for n in PACKAGES},
                                            "key": fingerprint})

    def build(out: Path) -> None:
        say(f"kubernetes apt repository {b.tag}: packaging {', '.join(PACKAGES)} (dpkg-deb, signed)")
        repo = out / "repo"
        repo.mkdir()
        with entry.log().open("w") as log:
            for name in PACKAGES:
                _deb(name, b, bins, out / "work", repo, log)
            shutil.rmtree(out / "work", ignore_errors=True)
            with (repo / "Packages").open("w") as f:
                _run(["apt-ftparchive", "packages", "."], log, "apt-ftparchive packages", cwd=repo, stdout=f)
            _run(["gzip", "-k9n", "Packages"], log, "gzip Packages", cwd=repo)
            with (repo / "Release").open("w") as f:
                _run(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=skyrack-lab",
                      "-o", f"APT::FTPArchive::Release::Label=Kubernetes {b.version}", "release", "."],
                     log, "apt-ftparchive release", cwd=repo, stdout=f)
            gpg = ["gpg", "--homedir", str(home), "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", ""]
            with _agent_stopped(home):
                _run([*gpg, "--clearsign", "-o", "InRelease", "Release"], log, "signing InRelease", cwd=repo)
                _run([*gpg, "-abs", "-o", "Release.gpg", "Release"], log, "signing Release.gpg", cwd=repo)
                _run([*gpg, "--armor", "--export", "-o", "Release.key"], log, "exporting Release.key", cwd=repo)
        os.chmod(repo, 0o755)  # noqa: S103 - a public package repository, served read-only
    return ensure(entry, build, say) / "repo"


def repo_path(b: KubernetesBuild) -> str:
    """The repository's path on the lab host's mirror, in pkgs.k8s.io's shape (one repository per minor)."""
    return f"kubernetes/core:/stable:/v1.{b.minor}/deb/"
