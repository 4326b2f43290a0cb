"""OCI images of the cluster's own components, assembled from the built binaries without a registry or daemon.

Each image is an OCI layout made with `umoci` (Debian's package): a root filesystem laid
out here, one layer, the entrypoint and user upstream's image has. Most are a static
binary on an empty filesystem, as upstream's distroless images are; kube-proxy also needs
iptables, so it gets a Debian minbase root with iptables and conntrack, as upstream's
image does. Prometheus (the cluster layer's monitoring) is upstream's layout: /bin/prometheus, run as
nobody, /prometheus its working and data directory. `skopeo` copies a layout into the lab's registry (`publish`).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..upstream import KubernetesBuild
from . import mirrors
from .cache import BuildError, Entry, Say, ensure
from .kubernetes import Binaries

RECIPE_VERSION = 3
NONROOT = 65532  # upstream's distroless "nonroot" user
NOBODY = 65534  # upstream's Prometheus image runs as nobody
PROXY_PACKAGES = ("iptables", "conntrack", "kmod")


@dataclass(frozen=True)
class ImageSpec:
    name: str  # key in KubernetesBuild.images()
    binaries: tuple[str, ...]
    entrypoint: tuple[str, ...]
    user: int = 0
    debian: bool = False  # a Debian root (kube-proxy) instead of an empty one
    file_caps: str = ""  # file capabilities of the entrypoint (setcap), as upstream's image sets them


SPECS = (
    ImageSpec("kube-apiserver", ("kube-apiserver",), ("/usr/local/bin/kube-apiserver",)),
    ImageSpec("kube-controller-manager", ("kube-controller-manager",), ("/usr/local/bin/kube-controller-manager",)),
    ImageSpec("kube-scheduler", ("kube-scheduler",), ("/usr/local/bin/kube-scheduler",)),
    # nonroot binding port 53: upstream's image gives /coredns cap_net_bind_service as a file capability
    ImageSpec("coredns", ("coredns",), ("/coredns",), user=NONROOT, file_caps="cap_net_bind_service=+ep"),
    ImageSpec("pause", ("pause",), ("/pause",), user=NONROOT),
    ImageSpec("kube-proxy", ("kube-proxy",), ("/usr/local/bin/kube-proxy",), debian=True),
    # upstream's e2e image, for the lab's cluster tests (not part of a cluster)
    ImageSpec("agnhost", ("agnhost",), ("/agnhost",)),
    ImageSpec("prometheus", ("prometheus",), ("/bin/prometheus",), user=NOBODY),
)
TARGET = {"coredns": "coredns", "pause": "pause", "agnhost": "agnhost", "prometheus": "bin/prometheus"}


def _run(cmd: list[str], log, what: str) -> None:
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    if subprocess.run(cmd, stdout=log, stderr=log, check=False).returncode != 0:
        raise BuildError(f"images: {what} failed; see {log.name}")


def _skeleton(root: Path) -> None:
    """What a distroless root has: /etc/passwd with root and nonroot, /tmp, CA certificates."""
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "tmp").mkdir(mode=0o1777, exist_ok=True)
    (root / "etc/passwd").write_text(f"root:x:0:0:root:/root:/sbin/nologin\n"
                                     f"nonroot:x:{NONROOT}:{NONROOT}::/home/nonroot:/sbin/nologin\n"
                                     f"nobody:x:{NOBODY}:{NOBODY}:nobody:/nonexistent:/sbin/nologin\n")
    (root / "etc/group").write_text(f"root:x:0:\nnonroot:x:{NONROOT}:\nnogroup:x:{NOBODY}:\n")
    certs = Path("/etc/ssl/certs/ca-certificates.crt")
    if certs.exists():
        (root / "etc/ssl/certs").mkdir(parents=True, exist_ok=True)
        shutil.copy2(certs, root / "etc/ssl/certs/ca-certificates.crt")


def _debian_root(root: Path, suite: str, log) -> None:
    source = mirrors.primary(suite)
    if source is None:
        raise BuildError(f"images: no HTTP Debian source for {suite!r} in /etc/apt (kube-proxy's image needs one)")
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(PROXY_PACKAGES)}", suite, str(root), source.uri],
         log, "debootstrap for kube-proxy's image")
    subprocess.run(["chroot", str(root), "apt-get", "clean"], stdout=log, stderr=log, check=False)
    for sub in ("var/lib/apt/lists", "var/cache/apt", "var/log"):
        shutil.rmtree(root / sub, ignore_errors=True)
        (root / sub).mkdir(parents=True, exist_ok=True)


def _image(spec: ImageSpec, ref: str, bins: Binaries, layout: Path, work: Path, suite: str, log) -> None:
    tag = ref.rsplit(":", 1)[1]
    image = f"{layout}:{spec.name}-{tag}"
    root = work / spec.name
    if spec.debian:
        _debian_root(root, suite, log)
    _skeleton(root)
    for b in spec.binaries:
        dest = root / TARGET.get(b, f"usr/local/bin/{b}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(bins.path(b), dest)
    if spec.file_caps:
        _run(["setcap", spec.file_caps, str(root / spec.entrypoint[0].lstrip("/"))], log, f"setcap {spec.name}")
    if not (layout / "index.json").exists():
        _run(["umoci", "init", "--layout", str(layout)], log, "umoci init")
    _run(["umoci", "new", "--image", image], log, f"umoci new {spec.name}")
    _run(["umoci", "insert", "--image", image, str(root), "/"], log, f"umoci insert {spec.name}")
    _run(["umoci", "config", "--image", image, "--config.user", f"{spec.user}:{spec.user}",
          "--config.workingdir", "/",
          "--config.env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          *[a for e in spec.entrypoint for a in ("--config.entrypoint", e)],
          "--os", "linux", "--architecture", "amd64", "--no-history"], log, f"umoci config {spec.name}")
    shutil.rmtree(root)


def build(b: KubernetesBuild, bins: Binaries, suite: str, say: Say) -> Path:
    """One OCI layout holding every component image, tagged `<name>-<tag>`; returns its directory."""
    refs = b.images()
    entry = Entry("images", b.tag, {"recipe": RECIPE_VERSION, "images": refs, "suite": suite,
                                    "binaries": sorted({str(p) for p in (bins.kubernetes, bins.coredns,
                                                                         bins.pause, bins.prometheus)}),
                                    "proxy_packages": PROXY_PACKAGES})

    def make(out: Path) -> None:
        say(f"images {b.tag}: assembling {', '.join(s.name for s in SPECS)} (umoci)")
        with entry.log().open("w") as log:
            work = out / "work"
            work.mkdir()
            for spec in SPECS:
                _image(spec, refs[spec.name], bins, out / "oci", work, suite, log)
            shutil.rmtree(work)
    return ensure(entry, make, say) / "oci"


def layout_tag(name: str, ref: str) -> str:
    return f"{name}-{ref.rsplit(':', 1)[1]}"


def publish(layout: Path, b: KubernetesBuild, registry: str, log_path: Path, ca_dir: Path) -> list[str]:
    """Copy every image into `registry` (host:port, HTTPS) under upstream's name, verifying the registry's
    certificate against the CA(s) in `ca_dir` (skopeo's --dest-cert-dir: its *.crt files)."""
    pushed = []
    with log_path.open("a") as log:
        for spec in SPECS:
            ref = b.images()[spec.name]
            dest = f"docker://{registry}/{ref}"
            source = f"oci:{layout}:{layout_tag(spec.name, ref)}"
            _run(["skopeo", "copy", "--quiet", "--dest-cert-dir", str(ca_dir), source, dest], log,
                 f"pushing {ref} to {registry}")
            pushed.append(ref)
    return pushed
