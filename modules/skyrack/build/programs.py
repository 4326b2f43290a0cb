"""Upstream programs built from one Go module release in a wrapper module: Receptor, containerd, etcd, Prometheus.

A wrapper module requires the release and builds its commands, so the `replace` lines of the
release's own go.mod (paths into its monorepo, which the module zip does not carry) do not
apply and every dependency comes from the module proxy at the version the release requires.
The version the program reports is stamped with `-X` as the project's own Makefile does, and
every binary must report it before the entry is cached:
`<cache>/build/<component>/<version>-<recipe>/bin/<command>`.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .. import upstream
from . import go
from .cache import BuildError, Entry, Say, ensure


@dataclass(frozen=True)
class GoProgram:
    component: str  # the cache entry's name
    version: str  # the release, "v1.4.4"
    go: str  # the `go` line of the release's go.mod
    commands: dict[str, str]  # binary name -> package path (the modules they live in are `requires`)
    requires: tuple[str, ...]  # modules the wrapper requires, all at `version`
    stamps: tuple[str, ...] = ()  # `-X` assignments, "{version}" filled in
    version_args: dict[str, tuple[str, ...]] = field(default_factory=dict)  # default: --version
    tags: str = ""
    recipe: int = 1
    reports: str = ""  # the version the binaries print, when it is not the module's (Prometheus)

    def entry(self) -> Entry:
        meta: dict[str, object] = {"recipe": self.recipe, "go": go.version(), "module": self.requires[0]}
        if len(self.requires) > 1 or self.tags or len(self.commands) > 1:
            meta.update(requires=list(self.requires), commands=self.commands, tags=self.tags)
        return Entry(self.component, self.version, meta)

    def ldflags(self) -> str:
        bare = self.reports or self.version.lstrip("v")
        return " ".join(["-s", "-w", *(f"-X {s.format(version=self.version, bare=bare)}" for s in self.stamps)])


def _default_name(pkg: str) -> str:
    """The file `go build -o dir/` writes for a main package: its last path element, a major-version suffix
    (`/v3`) skipped."""
    parts = pkg.rstrip("/").split("/")
    if len(parts) > 1 and parts[-1][:1] == "v" and parts[-1][1:].isdigit():
        parts.pop()
    return parts[-1]


def build(p: GoProgram, say: Say = print) -> Path:
    """`<entry>/bin/`: every command of `p`, built once per version and recipe."""
    e = p.entry()

    def make(out: Path) -> None:
        with e.log().open("w") as log:
            src = out / "src"
            src.mkdir()
            requires = "".join(f"\t{m} {p.version}\n" for m in p.requires)
            (src / "go.mod").write_text(f"module skyrack.invalid/{p.component}-build\n\ngo {p.go}\n\n"
                                        f"require (\n{requires})\n")
            bindir = out / "bin"
            args = ["-mod=mod", "-trimpath", "-ldflags", p.ldflags(), *(["-tags", p.tags] if p.tags else [])]
            if len(p.commands) == 1:  # `go build -o dir/` needs several packages; one gets a file name
                [(name, pkg)] = p.commands.items()
                go.build([*args, "-o", str(bindir / name), pkg], src, e, log, say)
            else:
                bindir.mkdir()
                go.build([*args, "-o", str(bindir) + "/", *p.commands.values()], src, e, log, say)
                for name, pkg in p.commands.items():
                    built = bindir / _default_name(pkg)
                    if built.name != name:
                        built.rename(bindir / name)
            for name in p.commands:
                check = p.version_args.get(name, ("--version",))
                proc = subprocess.run([str(bindir / name), *check], capture_output=True, text=True, timeout=60,
                                      check=False)
                said = f"{proc.stdout.strip()} {proc.stderr.strip()}"
                log.write(f"{name} {' '.join(check)}: {said}\n")
                if (p.reports or p.version.lstrip("v")) not in said:
                    raise BuildError(f"{p.component} {p.version}: {name} {' '.join(check)} does not report "
                                     f"{p.reports or p.version}; see {log.name}")
            shutil.rmtree(src)
    go.require_go()
    return ensure(e, make, say) / "bin"


RECEPTOR = GoProgram(
    "receptor", upstream.RECEPTOR_VERSION, upstream.RECEPTOR_GO,
    {"receptor": "github.com/ansible/receptor/cmd/receptor-cl"}, ("github.com/ansible/receptor",),
    stamps=("github.com/ansible/receptor/internal/version.Version={bare}",))

CONTAINERD = GoProgram(
    "containerd", upstream.CONTAINERD_VERSION, upstream.CONTAINERD_GO,
    {"containerd": "github.com/containerd/containerd/v2/cmd/containerd",
     "containerd-shim-runc-v2": "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
     "ctr": "github.com/containerd/containerd/v2/cmd/ctr"},
    ("github.com/containerd/containerd/v2",),
    stamps=("github.com/containerd/containerd/v2/version.Version={version}",
            "github.com/containerd/containerd/v2/version.Revision=skyrack"),
    version_args={"containerd-shim-runc-v2": ("-v",)},
    # btrfs snapshots need cgo (the builds here have none; nodes use overlayfs); the CLI's man pages are not shipped
    tags="no_btrfs urfave_cli_no_docs")

ETCD = GoProgram(
    "etcd", upstream.ETCD_VERSION, upstream.ETCD_GO,
    {"etcd": "go.etcd.io/etcd/server/v3", "etcdctl": "go.etcd.io/etcd/etcdctl/v3",
     "etcdutl": "go.etcd.io/etcd/etcdutl/v3"},
    ("go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/etcdctl/v3", "go.etcd.io/etcd/etcdutl/v3"),
    version_args={"etcdctl": ("version",), "etcdutl": ("version",)})

PROMETHEUS = GoProgram(
    "prometheus", upstream.PROMETHEUS_MODULE_VERSION, upstream.PROMETHEUS_GO,
    {"prometheus": "github.com/prometheus/prometheus/cmd/prometheus"}, ("github.com/prometheus/prometheus",),
    stamps=("github.com/prometheus/common/version.Version={bare}",
            "github.com/prometheus/common/version.Revision=skyrack"),
    # the cluster layer's scrape configs discover through Kubernetes only (kube/monitoring.py); upstream's own
    # build tags leave out the cloud discoveries and their SDKs. The web UI's assets are not embedded
    # (`builtinassets` needs an npm build): the API, /-/ready and /metrics serve, the UI pages do not.
    tags="remove_all_sd enable_kubernetes_sd",
    reports=upstream.prometheus_release(upstream.PROMETHEUS_MODULE_VERSION))
