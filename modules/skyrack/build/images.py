"""OCI images of the cluster's own components, assembled from the built binaries without a registry or daemon.

Each image is an OCI layout made with `umoci` (Debian's package): a root filesystem laid
out here, one layer, the entrypoint and user upstream's image has. Most are a static
binary on an empty filesystem, as upstream's distroless images are; kube-proxy also needs
iptables, so it gets a Debian minbase root with iptables and conntrack, as upstream's
image does. agnhost (upstream's e2e test image: the lab's cluster tests and Kubernetes' conformance suite run it)
is upstream's layout on a Debian minbase root with the tools its tests exec in it (a shell, curl, dig, nc, ip,
iperf, socat: upstream's image is Alpine with the same), CoreDNS at /coredns, porter's test certificate, the
agnhost-2 link and the user and group the supplemental-groups tests look up. Prometheus (the cluster layer's
monitoring) is upstream's layout: /bin/prometheus, run as nobody, /prometheus its working and data directory.
`skopeo` copies a layout into the lab's registry (`publish`).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..upstream import KubernetesBuild
from . import go, mirrors
from .cache import BuildError, Entry, Say, ensure
from .kubernetes import Binaries

RECIPE_VERSION = 4
NONROOT = 65532  # upstream's distroless "nonroot" user
NOBODY = 65534  # upstream's Prometheus image runs as nobody
PROXY_PACKAGES = ("iptables", "conntrack", "kmod")
# upstream's agnhost Dockerfile: apk add bind-tools curl netcat-openbsd iproute2 iperf bash util-linux socat
# (bash and util-linux are in every Debian minbase root)
AGNHOST_PACKAGES = ("bind9-dnsutils", "curl", "netcat-openbsd", "iproute2", "iperf", "socat")
# upstream's agnhost image: `adduser -u 1000 -D user-defined-in-image; addgroup -g 50000 group-defined-in-image;
# addgroup user-defined-in-image group-defined-in-image` (the SupplementalGroupsPolicy tests read them)
AGNHOST_USERS = "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"
AGNHOST_GROUP = "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"
PORTER_CERTS = ("localhost.crt", "localhost.key")  # test/images/agnhost/porter: a public test key, by design


@dataclass(frozen=True)
class ImageSpec:
    name: str  # key in KubernetesBuild.images()
    binaries: tuple[str, ...]
    entrypoint: tuple[str, ...]
    user: int = 0
    packages: tuple[str, ...] = ()  # a Debian minbase root with these (kube-proxy, agnhost) instead of an empty one
    file_caps: str = ""  # file capabilities of the entrypoint (setcap), as upstream's image sets them
    cmd: tuple[str, ...] = ()


SPECS = (
    ImageSpec("kube-apiserver", ("kube-apiserver",), ("/usr/local/bin/kube-apiserver",)),
    ImageSpec("kube-controller-manager", ("kube-controller-manager",), ("/usr/local/bin/kube-controller-manager",)),
    ImageSpec("kube-scheduler", ("kube-scheduler",), ("/usr/local/bin/kube-scheduler",)),
    # nonroot binding port 53: upstream's image gives /coredns cap_net_bind_service as a file capability
    ImageSpec("coredns", ("coredns",), ("/coredns",), user=NONROOT, file_caps="cap_net_bind_service=+ep"),
    ImageSpec("pause", ("pause",), ("/pause",), user=NONROOT),
    ImageSpec("kube-proxy", ("kube-proxy",), ("/usr/local/bin/kube-proxy",), packages=PROXY_PACKAGES),
    # upstream's e2e image, for the lab's cluster tests and the conformance suite (not part of a cluster)
    ImageSpec("agnhost", ("agnhost", "coredns"), ("/agnhost",), packages=AGNHOST_PACKAGES, cmd=("pause",)),
    ImageSpec("prometheus", ("prometheus",), ("/bin/prometheus",), user=NOBODY),
)
TARGET = {"coredns": "coredns", "pause": "pause", "agnhost": "agnhost", "prometheus": "bin/prometheus"}


def _run(cmd: list[str], log, what: str) -> None:
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    if subprocess.run(cmd, stdout=log, stderr=log, check=False).returncode != 0:
        raise BuildError(f"images: {what} failed; see {log.name}")


def skeleton(root: Path) -> None:
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


def debian_root(root: Path, suite: str, packages: tuple[str, ...], name: str, log) -> None:
    """A Debian minbase root of `suite` with `packages`, apt's lists and caches emptied (the image `name`)."""
    source = mirrors.primary(suite)
    if source is None:
        raise BuildError(f"images: no HTTP Debian source for {suite!r} in /etc/apt ({name}'s image needs one)")
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", suite, str(root), source.uri],
         log, f"debootstrap for {name}'s image")
    subprocess.run(["chroot", str(root), "apt-get", "clean"], stdout=log, stderr=log, check=False)
    for sub in ("var/lib/apt/lists", "var/cache/apt", "var/log"):
        shutil.rmtree(root / sub, ignore_errors=True)
        (root / sub).mkdir(parents=True, exist_ok=True)


def _agnhost_layout(root: Path, k8s_dir: Path) -> None:
    """What upstream's agnhost Dockerfile adds beside the binary."""
    (root / "uploads").mkdir(exist_ok=True)  # netexec's upload directory
    for name in PORTER_CERTS:  # porter serves TLS with these from its working directory, /
        shutil.copy2(k8s_dir / "test/images/agnhost/porter" / name, root / name)
    (root / "agnhost-2").symlink_to("agnhost")  # the entrypoint tests run the image's agnhost-2
    with (root / "etc/passwd").open("a") as f:
        f.write(AGNHOST_USERS)
    with (root / "etc/group").open("a") as f:
        f.write(AGNHOST_GROUP)


def _image(spec: ImageSpec, ref: str, bins: Binaries, layout: Path, work: Path, suite: str, k8s_dir: Path,
           log) -> None:
    root = work / spec.name
    if spec.packages:
        debian_root(root, suite, spec.packages, spec.name, log)
    skeleton(root)
    for b in spec.binaries:
        dest = root / TARGET.get(b, f"usr/local/bin/{b}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(bins.path(b), dest)
    if spec.file_caps:
        _run(["setcap", spec.file_caps, str(root / spec.entrypoint[0].lstrip("/"))], log, f"setcap {spec.name}")
    if spec.name == "agnhost":
        _agnhost_layout(root, k8s_dir)
    assemble(layout, layout_tag(spec.name, ref), root, log, user=spec.user, entrypoint=spec.entrypoint,
             cmd=spec.cmd)
    shutil.rmtree(root)


def assemble(layout: Path, tag: str, root: Path, log, *, user: int, entrypoint: tuple[str, ...],
             cmd: tuple[str, ...] = (), stop_signal: str = "") -> None:
    """Add the image `tag` to the OCI layout: `root` as its one layer, run as `user`."""
    image = f"{layout}:{tag}"
    if not (layout / "index.json").exists():
        _run(["umoci", "init", "--layout", str(layout)], log, "umoci init")
    _run(["umoci", "new", "--image", image], log, f"umoci new {tag}")
    _run(["umoci", "insert", "--image", image, str(root), "/"], log, f"umoci insert {tag}")
    _run(["umoci", "config", "--image", image, "--config.user", f"{user}:{user}",
          "--config.workingdir", "/",
          "--config.env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          *[a for e in entrypoint for a in ("--config.entrypoint", e)],
          *[a for c in cmd for a in ("--config.cmd", c)],
          *(["--config.stopsignal", stop_signal] if stop_signal else []),
          "--os", "linux", "--architecture", "amd64", "--no-history"], log, f"umoci config {tag}")


def copy_image(src_layout: Path, src_tag: str, layout: Path, tag: str, log) -> None:
    """Copy one image of another OCI layout into `layout` under `tag` (skopeo)."""
    _run(["skopeo", "copy", "--quiet", f"oci:{src_layout}:{src_tag}", f"oci:{layout}:{tag}"], log,
         f"copying {src_tag} into {layout}")


def layer(layout: Path, base: str, tag: str, root: Path, log, *, cmd: tuple[str, ...] = ()) -> None:
    """The image `tag`: the image `base` of the layout and `root` as one layer more (a Dockerfile's `FROM base`,
    `COPY`), its command replaced by `cmd` if one is given."""
    image = f"{layout}:{tag}"
    _run(["umoci", "insert", "--image", f"{layout}:{base}", "--tag", tag, "--no-history", str(root), "/"], log,
         f"umoci insert {tag}")
    if cmd:
        _run(["umoci", "config", "--image", image, "--clear", "config.cmd",
              *[a for c in cmd for a in ("--config.cmd", c)], "--no-history"], log, f"umoci config {tag}")


def untag(layout: Path, tag: str, log) -> None:
    _run(["umoci", "rm", "--image", f"{layout}:{tag}"], log, f"umoci rm {tag}")


def build(b: KubernetesBuild, bins: Binaries, suite: str, say: Say) -> Path:
    """One OCI layout holding every component image, tagged `<name>-<tag>`; returns its directory."""
    refs = b.images()
    entry = Entry("images", b.tag, {"recipe": RECIPE_VERSION, "images": refs, "suite": suite,
                                    "binaries": sorted({str(p) for p in (bins.kubernetes, bins.coredns,
                                                                         bins.pause, bins.prometheus)}),
                                    "packages": {s.name: s.packages for s in SPECS if s.packages}})

    def make(out: Path) -> None:
        say(f"images {b.tag}: assembling {', '.join(s.name for s in SPECS)} (umoci)")
        with entry.log().open("w") as log:
            work = out / "work"
            work.mkdir()
            k8s_dir = Path(go.download(f"k8s.io/kubernetes@{b.tag}", entry, log)["Dir"])  # porter's certificate
            for spec in SPECS:
                _image(spec, refs[spec.name], bins, out / "oci", work, suite, k8s_dir, log)
            shutil.rmtree(work)
    return ensure(entry, make, say) / "oci"


def layout_tag(name: str, ref: str) -> str:
    return f"{name}-{ref.rsplit(':', 1)[1]}"


def publish(layout: Path, b: KubernetesBuild, registry: str, log_path: Path, ca_dir: Path) -> list[str]:
    """Copy every image into `registry` (host:port, HTTPS) under upstream's name (`push`)."""
    refs = {layout_tag(spec.name, b.images()[spec.name]): b.images()[spec.name] for spec in SPECS}
    return push(layout, refs, registry, log_path, ca_dir)


def push(layout: Path, refs: dict[str, str], registry: str, log_path: Path, ca_dir: Path) -> list[str]:
    """Copy each image of the layout (its tag -> upstream reference) into `registry` under the reference,
    verifying the registry's certificate against the CA(s) in `ca_dir` (skopeo's --dest-cert-dir: *.crt)."""
    pushed = []
    with log_path.open("a") as log:
        for tag, ref in refs.items():
            _run(["skopeo", "copy", "--quiet", "--dest-cert-dir", str(ca_dir), f"oci:{layout}:{tag}",
                  f"docker://{registry}/{ref}"], log, f"pushing {ref} to {registry}")
            pushed.append(ref)
    return pushed
