"""Debian packages of kubeadm, kubelet and kubectl, published as a signed apt repository.

The packages carry what upstream's (pkgs.k8s.io) do: the binary, and for kubelet its
systemd unit and kubeadm's drop-in (`10-kubeadm.conf`, which reads
`/var/lib/kubelet/kubeadm-flags.env` and `/etc/default/kubelet`). The repository has
upstream's flat layout (`deb [signed-by=...] <url> /` with `Release.key` beside it), so
the same cloud-init and the same Ansible role install from it as from a site's mirror of
pkgs.k8s.io. It is signed with a key made once for this cache (`gpg`, private part kept
root-only in the cache); nodes fetch `Release.key` from the repository, as they do upstream.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..upstream import KubernetesBuild
from .cache import ROOT, BuildError, Entry, Say, ensure
from .kubernetes import Binaries

RECIPE_VERSION = 2
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
PACKAGES = {  # name -> (Depends, description)
    "kubelet": ("iptables, iproute2, mount, util-linux, conntrack, ethtool, socat",
                "Node agent for Kubernetes clusters"),
    "kubeadm": ("kubelet, kubectl", "Command-line utility for administering a Kubernetes cluster"),
    "kubectl": ("", "Command-line utility for interacting with a Kubernetes cluster"),
}


def _run(cmd: list[str], log, what: str, **kw) -> subprocess.CompletedProcess:
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    proc = subprocess.run(cmd, stdout=kw.pop("stdout", log), stderr=log, check=False, **kw)
    if proc.returncode != 0:
        raise BuildError(f"kubernetes apt repository: {what} failed; see {log.name}")
    return proc


def _deb(name: str, b: KubernetesBuild, bins: Binaries, work: Path, out: Path, log) -> None:
    root = work / name
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    shutil.copy2(bins.path(name), root / "usr/bin" / name)
    if name == "kubelet":
        unit = root / "usr/lib/systemd/system"
        (unit / "kubelet.service.d").mkdir(parents=True)
        (unit / "kubelet.service").write_text(KUBELET_UNIT)
        (unit / "kubelet.service.d/10-kubeadm.conf").write_text(KUBEADM_DROPIN)
        (root / "etc/kubernetes/manifests").mkdir(parents=True)
        postinst = root / "DEBIAN/postinst"
        postinst.write_text(KUBELET_POSTINST)
        postinst.chmod(0o755)
    depends, description = PACKAGES[name]
    control = [f"Package: {name}", f"Version: {b.version}-1.1", "Architecture: amd64",
               "Maintainer: skyrack lab <skyrack-lab@invalid>", "Section: admin", "Priority: optional",
               "Homepage: https://kubernetes.io"]
    if depends:
        control.append(f"Depends: {depends}")
    control.append(f"Description: {description}\n Built from k8s.io/kubernetes {b.tag} by skyrack for an air-gapped lab.")
    (root / "DEBIAN/control").write_text("\n".join(control) + "\n")
    _run(["dpkg-deb", "--root-owner-group", "-Zxz", "-z1", "--build", str(root), str(out / f"{name}_{b.version}-1.1_amd64.deb")],
         log, f"dpkg-deb {name}")
    shutil.rmtree(root)


def signing_home(root: Path = ROOT) -> Path:
    """The lab repository's signing key (made once, root-only)."""
    home = root / "build" / "apt-signing-key"
    if not (home / "pubring.kbx").exists() or not any((home / "private-keys-v1.d").glob("*.key")):
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(mode=0o700, parents=True)
        subprocess.run(["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", "",
                        "--quick-gen-key", "skyrack lab Kubernetes repository <skyrack-lab@invalid>", "ed25519",
                        "sign", "never"], check=True, capture_output=True)
    return home


def repository(b: KubernetesBuild, bins: Binaries, say: Say) -> Path:
    """`<entry>/repo/`: the flat, signed apt repository (Packages, Release, InRelease, Release.key, the .debs)."""
    home = signing_home()
    fpr = subprocess.run(["gpg", "--homedir", str(home), "--with-colons", "--list-keys"], capture_output=True,
                         text=True, check=True).stdout
    fingerprint = next(line.split(":")[9] for line in fpr.splitlines() if line.startswith("fpr:"))
    entry = Entry("kubernetes-apt", b.tag, {"recipe": RECIPE_VERSION, "binaries": str(bins.kubernetes),
                                            "packages": PACKAGES, "key": fingerprint})

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
            _run([*gpg, "--clearsign", "-o", "InRelease", "Release"], log, "signing InRelease", cwd=repo)
            _run([*gpg, "-abs", "-o", "Release.gpg", "Release"], log, "signing Release.gpg", cwd=repo)
            _run([*gpg, "--armor", "--export", "-o", "Release.key"], log, "exporting Release.key", cwd=repo)
        os.chmod(repo, 0o755)  # noqa: S103 - a public package repository, served read-only
    return ensure(entry, build, say) / "repo"


def repo_path(b: KubernetesBuild) -> str:
    """The repository's path on the lab host's mirror, in pkgs.k8s.io's shape (one repository per minor)."""
    return f"kubernetes/core:/stable:/v1.{b.minor}/deb/"
