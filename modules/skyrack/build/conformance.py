"""Kubernetes' own conformance suite, at the cluster's release, and the images its tests run (issue #26).

* `suite(b)`: `e2e.test`, upstream's end-to-end suite (`go test -c k8s.io/kubernetes/test/e2e`), and the
  `ginkgo` CLI at the version Kubernetes requires (it runs `e2e.test` in parallel processes, as upstream's
  conformance image does). Both are built in the wrapper module the Kubernetes build uses
  (skyrack.build.kubernetes), so the packages they share with the cluster's binaries are compiled once. Beside
  them `images.txt`: what `e2e.test --list-images` says the suite can run.
* `suite_images(b, bins, suite, suite_dir)`: the suite's images this machine builds, under upstream's names, in
  one OCI layout: agnhost and pause are the cluster's own build (skyrack.build.images, already in the site's
  registry); busybox is built from Debian's source package, as Debian's `busybox-static` but for one patch
  (`BUSYBOX_PATCHES_LEFT_OUT`), its applets linked as upstream's image has them;
  glibc-dns-testing is a Debian root with dig and CoreDNS, as upstream's Dockerfile. Every other image
  of the list is in `UNBUILT` with the reason, so a test that needs one is reported, not mistaken for a
  failure of the cluster.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..upstream import KubernetesBuild
from . import go, images, mirrors
from . import kubernetes as k8s
from .cache import BuildError, Entry, Say, ensure
from .kubernetes import Binaries

RECIPE_VERSION = 4  # the subset's images (suite_images)
WHOLE_RECIPE_VERSION = 2  # the whole suite's (whole_suite_images)
E2E_PACKAGE = "k8s.io/kubernetes/test/e2e"
GINKGO_PACKAGE = "github.com/onsi/ginkgo/v2/ginkgo"
E2E_REGISTRY = "registry.k8s.io/e2e-test-images"  # upstream's PromoterE2eRegistry (test/utils/image)


def _suite_entry(b: KubernetesBuild) -> Entry:
    return k8s.component_entry("conformance", b.tag, b, packages=[E2E_PACKAGE, GINKGO_PACKAGE])


def suite(b: KubernetesBuild, say: Say = print) -> Path:
    """`<entry>/bin/e2e.test`, `<entry>/bin/ginkgo`, `<entry>/images.txt`, built once per Kubernetes release."""
    entry = _suite_entry(b)

    def build(out: Path) -> None:
        with entry.log().open("w") as log:
            src = k8s.wrapper_module(out / "src", b, entry, log)
            bindir = out / "bin"
            bindir.mkdir()
            flags = ["-mod=mod", "-trimpath", "-tags", k8s.BUILD_TAGS, "-ldflags", go.ldflags_version(b.tag, b.minor)]
            # the suite's packages first, with progress (`go test -c` prints none); then the test binary links
            # from the cache. The ginkgo CLI is the one main package of the list: it is written to bin/.
            go.build([*flags, "-o", str(bindir) + "/", f"{E2E_PACKAGE}/...", GINKGO_PACKAGE], src, entry, log, say)
            go.run(["test", "-c", "-vet=off", *flags, "-o", str(bindir / "e2e.test"), E2E_PACKAGE], src, entry, log,
                   "linking e2e.test")
            for name in ("e2e.test", "ginkgo"):
                if not (bindir / name).is_file():
                    raise BuildError(f"conformance {b.tag}: no {name} was built; see {log.name}")
            listed = subprocess.run([str(bindir / "e2e.test"), "--list-images"], capture_output=True, text=True,
                                    timeout=120, check=False)
            log.write(f"e2e.test --list-images (exit {listed.returncode}):\n{listed.stdout}{listed.stderr}\n")
            refs = [line.strip() for line in listed.stdout.splitlines() if re.fullmatch(r"\S+:\S+", line.strip())]
            if listed.returncode != 0 or not refs:
                raise BuildError(f"conformance {b.tag}: e2e.test --list-images listed nothing; see {log.name}")
            (out / "images.txt").write_text("".join(f"{r}\n" for r in refs))
            shutil.rmtree(src)
    return ensure(entry, build, say)


def listed_images(suite_dir: Path) -> list[str]:
    return (suite_dir / "images.txt").read_text().split()


# --- the images ---------------------------------------------------------------------------------------------

# upstream's glibc-dns-testing: debian-base, `apt-get install dnsutils` (bind9-dnsutils since Debian 12) and
# CoreDNS at /coredns; the DNS tests query through it beside agnhost (musl) to cover both C libraries
GLIBC_DNS_PACKAGES = ("bind9-dnsutils",)


@dataclass(frozen=True)
class E2EImage:
    name: str  # the repository under E2E_REGISTRY ("busybox")
    how: str  # what it is built from, for the docs and the report


# the suite's images built here, and from what
BUILT = (
    E2EImage("agnhost", "the cluster's build: k8s.io/kubernetes/test/images/agnhost (skyrack.build.images)"),
    E2EImage("busybox", "Debian's busybox source package built as Debian builds busybox-static, less the patch "
                        "that makes its shell drop environment names that are not identifiers (upstream's keeps "
                        "them); every applet linked in /bin as upstream's image has them (and at its usual path)"),
    E2EImage("glibc-dns-testing", "a Debian minbase root with bind9-dnsutils and the cluster's CoreDNS at "
                                  "/coredns, as upstream's Dockerfile (test/images/glibc-dns-testing)"),
)
# The images only the whole suite needs (bench/conformance.py without --subset): a second layout
# (`whole_suite_images()`), so that ./dev test, whose subset runs none of them, does not build them.
NGINX_PACKAGES = ("nginx",)
NONROOT_UID = 1234  # upstream's nonroot image: debian-base, `USER 1234`
PREVIOUS_AGNHOST = "agnhost (previous)"
WHOLE_SUITE = (
    E2EImage("nginx", "Debian's nginx on a minbase root in the layout of upstream's (nginx:1.27-alpine and 1.28: "
                      "/usr/share/nginx/html on port 80, logs to the container's output, `nginx -g 'daemon off;'`, "
                      "stopped by SIGQUIT); each tag the suite names is its own image"),
    E2EImage("nonroot", f"the same Debian root run as user {NONROOT_UID}, as upstream's debian-base `USER 1234`"),
    E2EImage("kitten", "the cluster's agnhost with test/images/kitten's kitten.jpg and data.json, `test-webserver`, "
                       "as upstream's Dockerfile"),
    E2EImage("nautilus", "the cluster's agnhost with test/images/nautilus's nautilus.jpg and data.json, "
                         "`test-webserver`, as upstream's Dockerfile"),
    E2EImage("nonewprivs", "nnp (test/images/nonewprivs) built here, setuid root, on an empty root"),
    E2EImage("sample-apiserver", "k8s.io/sample-apiserver (the Aggregator test's API server) built here at the "
                                 "cluster's release from its staging module, on an empty root, as upstream's on "
                                 "Alpine"),
    E2EImage("etcd", "the cluster's etcd (3.6) at /usr/local/bin/etcd under the tag the suite names (upstream's is "
                     "a 3.7 pre-release): the sample API server's own store"),
    E2EImage(PREVIOUS_AGNHOST, "the suite uses the previous agnhost release as an agnhost other than the cluster's "
                               "(deployment rollouts, kubectl): the cluster's agnhost with one more layer naming it, "
                               "a distinct image; not upstream's older build"),
)
SAMPLE_ETCD = "registry.k8s.io/etcd"  # upstream's GcEtcdRegistry: the sample API server's etcd
SAMPLE_APISERVER_MODULE = "k8s.io/sample-apiserver"
MARKER = "etc/skyrack-e2e-image"  # in every image built in place of an upstream one: what it stands in for
# the cluster's own images the suite runs under the same names (pause): published with the cluster
CLUSTER_IMAGES = ("pause",)
# why the others are not built here, by repository name (a prefix matches a path: "node-perf/")
UNBUILT = {
    "perl": "used by no conformance test of this release",
    "ipc-utils": "used by no conformance test of this release",
    "regression-issue-74839": "used by no conformance test of this release",
    "resource-consumer": "the autoscaling tests' load generator (not conformance)",
    "apparmor-loader": "AppArmor tests (not conformance; the lab's nodes have no AppArmor)",
    "volume/": "storage servers (NFS, iSCSI): not conformance, need kernel modules the lab may not load",
    "node-perf/": "node performance workloads (not conformance)",
    "sample-device-plugin": "device-plugin tests (not conformance)",
    "nfs-provisioner": "storage provisioner (not conformance)",
    "distroless-iptables": "kube-proxy's build image (not conformance)",
    "alpine": "the suite's deliberately invalid registry: never pullable, by design",
}


# why, by registry, for images outside upstream's e2e registry
UNBUILT_REGISTRIES = {
    "registry.k8s.io/sig-storage/": "CSI drivers and sidecars (storage tests with a CSI driver; not conformance)",
    "registry.k8s.io/cloud-provider-gcp/": "a GCE storage driver (not conformance)",
    "gcr.io/k8s-authenticated-test/": "a private registry (image-pull-secret tests need its credentials, by design)",
}


def repository(ref: str) -> str:
    """`registry.k8s.io/e2e-test-images/busybox:1.37.0-2` -> `busybox`; other registries: the last path part."""
    path = ref.rsplit(":", 1)[0]
    if path.startswith(E2E_REGISTRY + "/"):
        return path[len(E2E_REGISTRY) + 1:]
    return path.rsplit("/", 1)[-1]


def unbuilt(suite_dir: Path, b: KubernetesBuild, *, whole: bool = True) -> dict[str, str]:
    """Every listed image this machine does not build (with `whole` False: for the subset), with the reason."""
    built = {e.name for e in BUILT}
    cluster = {b.images()[n] for n in CLUSTER_IMAGES} | {b.images()["agnhost"]}
    whole_suite = set(_whole_suite_listed(suite_dir, b))
    out = {}
    for ref in listed_images(suite_dir):
        repo = repository(ref)
        if ref in cluster or (repo in built and repo != "agnhost") or (whole and ref in whole_suite):
            continue
        if ref in whole_suite:
            out[ref] = "built for the whole suite only (bench/conformance.py without --subset)"
            continue
        tag = ref.rsplit(":", 1)[1]
        by_registry = next((why for prefix, why in UNBUILT_REGISTRIES.items() if ref.startswith(prefix)), None)
        reason = by_registry or UNBUILT.get(f"{repo}:{tag}") or next(
            (why for key, why in UNBUILT.items() if repo == key or (key.endswith("/") and repo.startswith(key))),
            "not built here")
        out[ref] = reason
    return out


def _busybox_root(root: Path, suite: str, log) -> None:
    """A root of /bin/busybox and a link per applet (upstream's busybox image is `busybox --install`)."""
    work = root.parent / "busybox-src"
    work.mkdir()
    busybox = _busybox_build(work, suite, log)
    (root / "bin").mkdir(parents=True)
    shutil.copy2(busybox, root / "bin/busybox")
    applets = subprocess.run([str(root / "bin/busybox"), "--list-full"], capture_output=True, text=True,
                             check=True).stdout.split()
    _link_applets(root, applets)
    shutil.rmtree(work)


def _busybox_build(work: Path, suite: str, log) -> Path:
    """Debian's busybox source package for `suite`, fetched and verified by apt from the host's own mirrors,
    built as Debian builds busybox-static (its static configuration) with Debian's patches less
    `BUSYBOX_PATCHES_LEFT_OUT`; checked for what the suite needs of it (`_check_busybox`)."""
    src = work / "src"
    src.mkdir()
    _apt_source(work, suite, BUSYBOX_SOURCE, log)
    origs = sorted(work.glob(f"{BUSYBOX_SOURCE}_*.orig.tar.*"))
    debians = sorted(work.glob(f"{BUSYBOX_SOURCE}_*.debian.tar.*"))
    if len(origs) != 1 or len(debians) != 1:
        raise BuildError(f"conformance images: apt-get source {BUSYBOX_SOURCE} gave no single upstream tarball and "
                         f"Debian tarball; see {log.name}")
    _run(["tar", "xf", str(origs[0]), "-C", str(src), "--strip-components=1"], log, "unpacking busybox")
    _run(["tar", "xf", str(debians[0]), "-C", str(src)], log, "unpacking busybox's Debian files")
    for patch in busybox_patches((src / "debian/patches/series").read_text()):
        with (src / "debian/patches" / patch).open() as f:
            _run(["patch", "-p1", "--batch", "--forward"], log, f"busybox: Debian's {patch}", cwd=src, stdin=f)
    config = [src / "debian/config/os/linux", src / "debian/config/pkg/static"]
    if not all(c.is_file() for c in config):
        raise BuildError(f"conformance images: busybox's Debian source has no {', '.join(str(c) for c in config)}")
    (src / ".config").write_text("".join(c.read_text() for c in config))
    # Debian's rules: `yes "" | make oldconfig` settles options the shipped file does not name at their defaults
    proc = subprocess.run(["make", "oldconfig"], cwd=src, input="\n" * 5000, text=True, stdout=log, stderr=log,
                          check=False)
    if proc.returncode != 0:
        raise BuildError(f"conformance images: busybox's make oldconfig failed; see {log.name}")
    _run(["make", f"-j{os.cpu_count() or 1}", "busybox"], log, "building busybox", cwd=src)
    _check_busybox(src / "busybox")
    return src / "busybox"


# Debian's source package busybox-static is built from, and the patches of Debian's series left out of the
# image's build, with why (an unknown name here is an error, so a change in Debian's series is seen)
BUSYBOX_SOURCE = "busybox"
BUSYBOX_PATCHES_LEFT_OUT = {
    "revert-9c143ce52da11ec3d21a3491c3749841d3dc10f0.patch":
        "makes ash drop environment names that are not shell identifiers (`data-1`), which Kubernetes allows "
        "and upstream's ash keeps on purpose; four conformance tests read them through `sh -c env`",
    "temp-deb-installer-hack.patch": "debian-installer's option (off by default), written on top of the revert",
}
# a name Kubernetes allows in a container's environment and a shell does not: what the suite's tests use
BUSYBOX_ENV_PROBE = "data-1"


def busybox_patches(series: str) -> list[str]:
    """Debian's series (`debian/patches/series`) in order, less BUSYBOX_PATCHES_LEFT_OUT."""
    names = [line.split("#", 1)[0].split()[0] for line in series.splitlines() if line.split("#", 1)[0].strip()]
    missing = sorted(set(BUSYBOX_PATCHES_LEFT_OUT) - set(names))
    if missing:
        raise BuildError(f"conformance images: Debian's busybox series no longer has {', '.join(missing)}: "
                         "check skyrack.build.conformance.BUSYBOX_PATCHES_LEFT_OUT against it")
    return [n for n in names if n not in BUSYBOX_PATCHES_LEFT_OUT]


def _check_busybox(binary: Path) -> None:
    """The built busybox's shell passes on an environment name that is not a shell identifier, as upstream's
    image does (the suite's Secrets and ConfigMap environment tests run `sh -c env` in it)."""
    out = subprocess.run(["env", "-i", f"{BUSYBOX_ENV_PROBE}=kept", str(binary), "sh", "-c", "env"],
                         capture_output=True, text=True, timeout=30, check=False).stdout
    if f"{BUSYBOX_ENV_PROBE}=kept" not in out.splitlines():
        raise BuildError(f"conformance images: the busybox built here drops the environment name "
                         f"{BUSYBOX_ENV_PROBE!r} (`sh -c env` printed {out.split()}); the suite's environment "
                         "tests would fail")


def _apt_source(work: Path, suite: str, package: str, log) -> None:
    """`apt-get source --download-only package` into `work`, from the host's own Debian mirrors for `suite`
    (its -updates and -security as well), with their deb-src indexes in `work`: apt checks every file against
    the signed index, and the host's apt state is not touched."""
    srcs = [s for s in mirrors.sources() if any(x == suite or x.startswith(suite + "-") for x in s.suites)]
    if not srcs:
        raise BuildError(f"conformance images: no HTTP Debian source for {suite!r} in /etc/apt ({package}'s source "
                         "is fetched from it)")
    (work / "apt/lists/partial").mkdir(parents=True)
    (work / "apt/parts").mkdir()
    (work / "apt/sources.list").write_text(mirrors.sources_list(srcs, kind="deb-src"))
    opts = ["-o", f"Dir::Etc::SourceList={work / 'apt/sources.list'}", "-o", f"Dir::Etc::SourceParts={work / 'apt/parts'}",
            "-o", f"Dir::State::Lists={work / 'apt/lists'}", "-o", f"Dir::Cache={work / 'apt/cache'}",
            "-o", "APT::Sandbox::User=root", "-q"]
    _run(["apt-get", *opts, "update"], log, f"apt-get update of the deb-src indexes for {package}")
    _run(["apt-get", *opts, "source", "--download-only", package], log, f"apt-get source {package}", cwd=work)


def _run(cmd: list[str], log, what: str, *, cwd: Path | None = None, stdin=None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, stdin=stdin, stdout=log, stderr=log, check=False)
    if proc.returncode != 0:
        raise BuildError(f"conformance images: {what} failed (exit {proc.returncode}); see {log.name}")


def _link_applets(root: Path, applets: list[str]) -> None:
    """Every applet in /bin, as upstream's image has them (the official busybox image installs all of them
    there: the suite runs `/bin/sysctl`), and at its usual path as well (`sbin/sysctl`, `usr/bin/wget`)."""
    for applet in applets:  # "bin/sh", "sbin/sysctl", "usr/bin/wget", ...
        for link in (root / "bin" / Path(applet).name, root / applet):
            if link == root / "bin/busybox" or link.is_symlink() or link.exists():
                continue
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/bin/busybox")


def _glibc_dns_root(root: Path, bins: Binaries, suite: str, log) -> None:
    images.debian_root(root, suite, GLIBC_DNS_PACKAGES, "glibc-dns-testing", log)
    shutil.copy2(bins.path("coredns"), root / "coredns")


def suite_images(b: KubernetesBuild, bins: Binaries, suite: str, suite_dir: Path, say: Say = print) -> Path:
    """One OCI layout of the suite's images built here (`suite`: the Debian release of the roots built from
    packages), every tag the suite lists (images.layout_tag names them); returns its directory."""
    refs = image_refs(suite_dir)
    entry = Entry("conformance-images", b.tag, {"recipe": RECIPE_VERSION, "images": sorted(refs.values()),
                                                "packages": [*GLIBC_DNS_PACKAGES],
                                                "busybox": {"source": BUSYBOX_SOURCE,
                                                            "left_out": sorted(BUSYBOX_PATCHES_LEFT_OUT)}, "suite": suite,
                                                "coredns": str(bins.coredns)})
    roots = {"busybox": lambda root, log: _busybox_root(root, suite, log),
             "glibc-dns-testing": lambda root, log: _glibc_dns_root(root, bins, suite, log)}

    def make(out: Path) -> None:
        say(f"conformance images {b.tag}: assembling {', '.join(sorted(refs.values()))} (umoci)")
        with entry.log().open("w") as log:
            work = out / "work"
            work.mkdir()
            for name, make_root in roots.items():
                root = work / name
                make_root(root, log)
                images.skeleton(root)
                for tag, ref in refs.items():  # one root, each tag the suite names it by
                    if repository(ref) == name:
                        images.assemble(out / "oci", tag, root, log, user=0, entrypoint=(), cmd=("sh",))
                shutil.rmtree(root)
            shutil.rmtree(work)
    return ensure(entry, make, say) / "oci"


def image_refs(suite_dir: Path) -> dict[str, str]:
    """The layout tag -> upstream reference of every image `suite_images()` builds (agnhost and pause are the
    cluster's: published with it)."""
    ours = {e.name for e in BUILT} - {"agnhost"}
    refs = [r for r in listed_images(suite_dir) if r.startswith(E2E_REGISTRY + "/") and repository(r) in ours]
    if {repository(r) for r in refs} != ours:
        raise BuildError(f"conformance: e2e.test lists no {E2E_REGISTRY} image of {sorted(ours)} "
                         f"({suite_dir / 'images.txt'})")
    return {images.layout_tag(repository(r), r): r for r in refs}


def _previous_agnhost(ref: str, b: KubernetesBuild) -> bool:
    return ref.startswith(f"{E2E_REGISTRY}/agnhost:") and ref != b.images()["agnhost"]


def _whole_suite_listed(suite_dir: Path, b: KubernetesBuild) -> list[str]:
    names = {e.name for e in WHOLE_SUITE} - {PREVIOUS_AGNHOST, "etcd"}
    return [r for r in listed_images(suite_dir)
            if (r.startswith(E2E_REGISTRY + "/") and (repository(r) in names or _previous_agnhost(r, b)))
            or r.startswith(SAMPLE_ETCD + ":")]


def whole_suite_refs(suite_dir: Path, b: KubernetesBuild) -> dict[str, str]:
    """The layout tag -> upstream reference of every image `whole_suite_images()` builds."""
    names = {e.name for e in WHOLE_SUITE} - {PREVIOUS_AGNHOST}
    refs = _whole_suite_listed(suite_dir, b)
    missing = names - {repository(r) for r in refs}
    if missing:
        raise BuildError(f"conformance: e2e.test lists no {E2E_REGISTRY} image of {sorted(missing)} "
                         f"({suite_dir / 'images.txt'})")
    return {images.layout_tag(repository(r), r): r for r in refs}


def _marker(root: Path, ref: str) -> None:
    (root / MARKER).parent.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text(f"built by skyrack (skyrack.build.conformance) in place of {ref}\n")


def _nginx_layout(root: Path) -> None:
    """What upstream's nginx image has: the default server on port 80 serving /usr/share/nginx/html, and its
    logs on the container's output."""
    sites = root / "etc/nginx/sites-enabled"
    for old in sites.glob("*"):
        old.unlink()
    (sites / "default").write_text(
        "server {\n    listen 80;\n    listen [::]:80;\n    server_name localhost;\n"
        "    location / {\n        root /usr/share/nginx/html;\n        index index.html index.htm;\n    }\n}\n")
    html = root / "usr/share/nginx/html"
    html.mkdir(parents=True, exist_ok=True)
    if not (html / "index.html").exists():
        (html / "index.html").write_text("<!DOCTYPE html>\n<html><body><h1>Welcome to nginx!</h1></body></html>\n")
    logs = root / "var/log/nginx"
    logs.mkdir(parents=True, exist_ok=True)
    for name, target in (("access.log", "/dev/stdout"), ("error.log", "/dev/stderr")):
        (logs / name).unlink(missing_ok=True)
        (logs / name).symlink_to(target)


def _nnp_root(root: Path, k8s_dir: Path, entry: Entry, log) -> None:
    """nnp (prints its effective uid) built from upstream's source, setuid root, on an empty root."""
    src = root.parent / "nnp-src"
    src.mkdir()
    shutil.copy2(k8s_dir / "test/images/nonewprivs/nnp.go", src / "nnp.go")
    (src / "go.mod").write_text("module nnp\n\ngo 1.22\n")
    go.run(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(src / "nnp"), "."], src, entry, log, "building nnp")
    skeleton_bin = root / "usr/local/bin"
    skeleton_bin.mkdir(parents=True)
    shutil.copy2(src / "nnp", skeleton_bin / "nnp")
    (skeleton_bin / "nnp").chmod(0o4755)  # upstream: `RUN chmod +s /usr/local/bin/nnp`
    shutil.rmtree(src)


def _etcd_root(root: Path, bins: Binaries) -> None:
    (root / "usr/local/bin").mkdir(parents=True)
    shutil.copy2(bins.path("etcd"), root / "usr/local/bin/etcd")


def _sample_apiserver_root(root: Path, b: KubernetesBuild, entry: Entry, log, say: Say) -> None:
    """k8s.io/sample-apiserver at the cluster's release, in the wrapper module the Kubernetes build uses (so
    it links from that build's compiled packages), at /sample-apiserver."""
    src = k8s.wrapper_module(root.parent / "sample-apiserver-src", b, entry, log)
    bindir = root.parent / "sample-apiserver-bin"
    bindir.mkdir()
    go.build(["-mod=mod", "-trimpath", "-tags", k8s.BUILD_TAGS, "-ldflags", "-s -w", "-o", str(bindir) + "/",
              SAMPLE_APISERVER_MODULE], src, entry, log, say)
    root.mkdir()
    shutil.copy2(bindir / "sample-apiserver", root / "sample-apiserver")
    shutil.rmtree(src)
    shutil.rmtree(bindir)


def whole_suite_images(b: KubernetesBuild, bins: Binaries, suite: str, suite_dir: Path, cluster_layout: Path,
                       say: Say = print) -> Path:
    """A second OCI layout: the images only the whole suite needs (`WHOLE_SUITE`), every tag it lists; the
    ones built on agnhost start from the cluster's agnhost in `cluster_layout` (skyrack.build.images)."""
    refs = whole_suite_refs(suite_dir, b)
    agnhost = images.layout_tag("agnhost", b.images()["agnhost"])
    entry = k8s.component_entry("conformance-images-whole", b.tag, b, images=sorted(refs.values()),
                                conformance=WHOLE_RECIPE_VERSION, packages=list(NGINX_PACKAGES), suite=suite,
                                agnhost=f"{cluster_layout}:{agnhost}", etcd=str(bins.etcd))

    def make(out: Path) -> None:
        say(f"conformance images {b.tag}: assembling the whole suite's {', '.join(sorted(refs.values()))} (umoci)")
        layout, work = out / "oci", out / "work"
        work.mkdir()
        with entry.log().open("w") as log:
            k8s_dir = Path(go.download(f"k8s.io/kubernetes@{b.tag}", entry, log)["Dir"])
            by_repo: dict[str, list[tuple[str, str]]] = {}
            for tag, ref in sorted(refs.items()):
                by_repo.setdefault(PREVIOUS_AGNHOST if _previous_agnhost(ref, b) else repository(ref), []).append(
                    (tag, ref))
            debian = work / "debian"
            images.debian_root(debian, suite, NGINX_PACKAGES, "nginx", log)  # Debian's own users (www-data)
            for tag, ref in by_repo["nonroot"]:
                _marker(debian, ref)
                images.assemble(layout, tag, debian, log, user=NONROOT_UID, entrypoint=(), cmd=("/bin/sh",))
            _nginx_layout(debian)
            for tag, ref in by_repo["nginx"]:  # one root, a marker each: each tag its own image, as upstream's
                _marker(debian, ref)
                images.assemble(layout, tag, debian, log, user=0, entrypoint=(), cmd=("nginx", "-g", "daemon off;"),
                                stop_signal="SIGQUIT")
            nnp = work / "nnp"
            _nnp_root(nnp, k8s_dir, entry, log)
            images.skeleton(nnp)
            for tag, ref in by_repo["nonewprivs"]:
                _marker(nnp, ref)
                images.assemble(layout, tag, nnp, log, user=0, entrypoint=(), cmd=("nnp",))
            static: tuple[tuple[str, Callable[[Path], None], tuple[str, ...], tuple[str, ...]], ...] = (
                ("sample-apiserver", lambda r: _sample_apiserver_root(r, b, entry, log, say), ("/sample-apiserver",),
                 ()),
                ("etcd", lambda r: _etcd_root(r, bins), (), ("/usr/local/bin/etcd",)))
            for name, make_root, entrypoint, cmd in static:  # one static program each, on an empty root
                root = work / name
                make_root(root)
                images.skeleton(root)
                for tag, ref in by_repo[name]:
                    _marker(root, ref)
                    images.assemble(layout, tag, root, log, user=0, entrypoint=entrypoint, cmd=cmd)
            # the ones upstream builds FROM agnhost: the cluster's agnhost and one layer more
            images.copy_image(cluster_layout, agnhost, layout, "agnhost-base", log)
            for repo in ("kitten", "nautilus", PREVIOUS_AGNHOST):
                for tag, ref in by_repo[repo]:
                    extra = work / tag
                    _marker(extra, ref)
                    web: tuple[str, ...] = ()
                    if repo != PREVIOUS_AGNHOST:  # upstream: COPY html/<repo>.jpg, html/data.json; CMD test-webserver
                        for name in (f"{repo}.jpg", "data.json"):
                            shutil.copy2(k8s_dir / "test/images" / repo / "html" / name, extra / name)
                        web = ("test-webserver",)
                    images.layer(layout, "agnhost-base", tag, extra, log, cmd=web)
            images.untag(layout, "agnhost-base", log)
        shutil.rmtree(work)
    return ensure(entry, make, say) / "oci"
