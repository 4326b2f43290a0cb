"""The programs a cluster runs, from the Go module proxy: Kubernetes, CoreDNS, pause, containerd, etcd, Prometheus;
and KWOK, which simulates a fleet of nodes against it.

* **Kubernetes** (`k8s.io/kubernetes`): its go.mod points every `k8s.io/<staging>` module at
  `./staging/...`, which the module zip does not carry. A wrapper module requires
  `k8s.io/kubernetes` and replaces each staging module with its published `v0.<minor>.<patch>`
  (or the fallback `skyrack.upstream` names where the proxy lacks one); one `go build` makes
  every binary, so they share compiled packages. The version is stamped with ldflags, as
  upstream's release does, or kubeadm reports `v0.0.0-master` and its checks fail.
  Gang scheduling is upstream's own (kube-scheduler's GangScheduling plugin, beta in 1.37), so
  the scheduler is kube-scheduler itself.
* **CoreDNS**: a wrapper main with the plugins the Corefile uses, the way CoreDNS documents
  builds with a chosen plugin set (fewer dependencies, a quarter of the compile).
* **pause**: `build/pause/linux/pause.c` from the Kubernetes module, a static C program.
* **KWOK** (`sigs.k8s.io/kwok`): built against this Kubernetes' own client modules (the same
  staging replaces), so it speaks the cluster's API version and reuses the packages the
  Kubernetes build compiled; upstream's node and pod Stage files are kept beside the binary.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .. import upstream
from ..upstream import KubernetesBuild
from . import go, programs
from .cache import BuildError, Entry, Say, ensure

RECIPE_VERSION = 1
K8S_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubeadm", "kube-proxy",
                "kubectl")
# upstream's e2e test image (netexec, connect, dns tools): what the lab's cluster tests run in pods
E2E_COMMANDS = ("agnhost",)
BUILD_TAGS = "providerless"  # upstream's tag that leaves out the (removed) in-tree cloud providers
# The Corefiles' plugins (skyrack.kube.bootstrap: CoreDNS's COREFILE and the node cache's NODE_DNS_COREFILE),
# in CoreDNS's plugin.cfg order, which decides the order they run in.
COREDNS_PLUGINS = ("reload", "bind", "ready", "health", "prometheus", "errors", "log", "loadbalance", "cache",
                   "kubernetes", "loop", "forward")


@dataclass(frozen=True)
class Binaries:
    """Where the built programs are: `bin/<name>` under each component's cache entry."""

    kubernetes: Path
    coredns: Path
    pause: Path
    containerd: Path
    etcd: Path
    prometheus: Path

    def path(self, name: str) -> Path:
        if name in K8S_COMMANDS + E2E_COMMANDS:
            return self.kubernetes / "bin" / name
        if name in programs.CONTAINERD.commands:
            return self.containerd / name
        if name in programs.ETCD.commands:
            return self.etcd / name
        if name in programs.PROMETHEUS.commands:
            return self.prometheus / name
        return {"coredns": self.coredns / "bin/coredns", "pause": self.pause / "bin/pause"}[name]


def component_entry(component: str, version: str, b: KubernetesBuild, **extra: object) -> Entry:
    return Entry(component, version, {"recipe": RECIPE_VERSION, "go": go.version(), "kubernetes": b.version,
                                      "fallbacks": b.staging_fallbacks, "tags": BUILD_TAGS, **extra})


def _staging_replaces(kubernetes_gomod: str, entry: Entry, log) -> list[str]:
    data = json.loads(go.run(["mod", "edit", "-json", kubernetes_gomod], Path("/"), entry, log,
                             "reading k8s.io/kubernetes' go.mod"))
    return [r["Old"]["Path"] for r in data.get("Replace") or [] if r["New"]["Path"].startswith("./")]


def _served(module: str, version: str, entry: Entry) -> bool:
    proc = subprocess.run([go.require_go(), "mod", "download", f"{module}@{version}"], env=go.go_env(entry.root),
                          capture_output=True, text=True, timeout=600, check=False)
    return proc.returncode == 0


def _staging_version(module: str, b: KubernetesBuild, entry: Entry, log) -> str:
    """The module's release for this Kubernetes patch, or the nearest earlier patch the proxy serves."""
    patch = int(b.version.split(".")[2])
    want = b.staging_fallbacks.get(module, f"v0.{b.minor}.{patch}")
    if _served(module, want, entry):
        return want
    for p in range(patch - 1, -1, -1):  # the proxy's version list is partial: ask for each patch
        if _served(module, f"v0.{b.minor}.{p}", entry):
            log.write(f"{module}: {want} is not served; using v0.{b.minor}.{p}\n")
            return f"v0.{b.minor}.{p}"
    raise BuildError(f"{entry.component} {entry.version}: the Go module proxy serves no v0.{b.minor}.x <= {want} "
                     f"of {module}; see {log.name}")


def _replace_staging(module_dir: Path, b: KubernetesBuild, entry: Entry, log, staging: list[str]) -> None:
    args = [f"-replace={m}={m}@{_staging_version(m, b, entry, log)}" for m in staging]
    go.run(["mod", "edit", f"-require=k8s.io/kubernetes@{b.tag}", f"-replace=k8s.io/kubernetes=k8s.io/kubernetes@{b.tag}",
            *args], module_dir, entry, log, "pointing the staging modules at their releases")


def wrapper_module(src: Path, b: KubernetesBuild, e: Entry, log) -> Path:
    """`src`: a module requiring k8s.io/kubernetes at `b`, its staging modules at their releases."""
    src.mkdir()
    (src / "go.mod").write_text(f"module skyrack.invalid/kubernetes-build\n\ngo {b.go}\n")
    info = go.download(f"k8s.io/kubernetes@{b.tag}", e, log)
    _replace_staging(src, b, e, log, _staging_replaces(info["GoMod"], e, log))
    return src


def kubernetes(b: KubernetesBuild, say: Say) -> Path:
    e = component_entry("kubernetes", b.tag, b, commands=K8S_COMMANDS + E2E_COMMANDS)

    def build(out: Path) -> None:
        with e.log().open("w") as log:
            src = wrapper_module(out / "src", b, e, log)
            go.build(["-mod=mod", "-trimpath", "-tags", BUILD_TAGS, "-ldflags", go.ldflags_version(b.tag, b.minor),
                      "-o", str(out / "bin") + "/", *[f"k8s.io/kubernetes/cmd/{c}" for c in K8S_COMMANDS],
                      *[f"k8s.io/kubernetes/test/images/{c}" for c in E2E_COMMANDS]],
                     src, e, log, say)
            _check_versions(out / "bin", b, e, log)
    return ensure(e, build, say)


# upstream's Stage files the simulated fleet runs (kustomize/stage/ in the module): nodes become Ready and keep
# a lease; pods on them become Ready, complete, and go when deleted
KWOK_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml")


def kwok(b: KubernetesBuild, say: Say) -> Path:
    """KWOK's controller, against this Kubernetes' client modules: `<entry>/bin/kwok`, `<entry>/stages/`."""
    v = upstream.KWOK_VERSION
    entry = component_entry("kwok", v, b, stages=list(KWOK_STAGES))

    def build(out: Path) -> None:
        with entry.log().open("w") as log:
            src = out / "src"
            src.mkdir()
            (src / "go.mod").write_text(f"module skyrack.invalid/kwok-build\n\ngo {b.go}\n\n"
                                        f"require sigs.k8s.io/kwok {v}\n")
            info = go.download(f"k8s.io/kubernetes@{b.tag}", entry, log)
            staging = _staging_replaces(info["GoMod"], entry, log)
            go.run(["mod", "edit", *[f"-replace={m}={m}@{_staging_version(m, b, entry, log)}" for m in staging]],
                   src, entry, log, "pointing the Kubernetes modules at this cluster's release")
            go.build(["-mod=mod", "-trimpath", "-tags", BUILD_TAGS, "-ldflags",
                      f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={v.lstrip('v')} "
                      f"-X sigs.k8s.io/kwok/pkg/consts.KubeVersion={b.version}",
                      "-o", str(out / "bin/kwok"), "sigs.k8s.io/kwok/cmd/kwok"], src, entry, log, say)
            module = Path(go.download(f"sigs.k8s.io/kwok@{v}", entry, log)["Dir"])
            (out / "stages").mkdir()
            for stage in KWOK_STAGES:
                shutil.copyfile(module / "kustomize/stage" / stage, out / "stages" / Path(stage).name)
            proc = subprocess.run([str(out / "bin/kwok"), "--version"], capture_output=True, text=True, timeout=60,
                                  check=False)
            log.write(f"kwok --version: {proc.stdout.strip()} {proc.stderr.strip()}\n")
            if v.lstrip("v") not in proc.stdout + proc.stderr:
                raise BuildError(f"kwok {v}: kwok --version does not report {v}; see {log.name}")
            shutil.rmtree(src)
    return ensure(entry, build, say)


def _check_versions(bindir: Path, b: KubernetesBuild, entry: Entry, log) -> None:
    """Each binary must report the pinned version (kubeadm refuses a control plane it cannot place)."""
    for name in K8S_COMMANDS:
        args = {"kubectl": ["version", "--client"], "kubeadm": ["version", "-o", "short"]}.get(name, ["--version"])
        proc = subprocess.run([str(bindir / name), *args], capture_output=True, text=True, timeout=60, check=False)
        log.write(f"{name} {' '.join(args)}: {proc.stdout.strip()} {proc.stderr.strip()}\n")
        if b.tag not in proc.stdout:
            raise BuildError(f"kubernetes {b.tag}: {name} reports {proc.stdout.strip() or proc.stderr.strip()!r}, "
                             f"not {b.tag}; see {log.name}")


COREDNS_MAIN = """\
// CoreDNS with the plugins skyrack's Corefile uses (generated by skyrack.build.kubernetes).
package main

import (
\t"github.com/coredns/coredns/core/dnsserver"
\t"github.com/coredns/coredns/coremain"
{imports}
)

var directives = []string{{{directives}}}

func init() {{ dnsserver.Directives = directives }}

func main() {{ coremain.Run() }}
"""


def coredns(b: KubernetesBuild, say: Say) -> Path:
    entry = component_entry("coredns", b.coredns, b, plugins=COREDNS_PLUGINS)
    order = COREDNS_PLUGINS

    def build(out: Path) -> None:
        with entry.log().open("w") as log:
            src = out / "src"
            src.mkdir()
            pkg = {"prometheus": "metrics"}  # the directive `prometheus` lives in plugin/metrics
            imports = "\n".join(f'\t_ "github.com/coredns/coredns/plugin/{pkg.get(p, p)}"' for p in order)
            (src / "main.go").write_text(COREDNS_MAIN.format(imports=imports,
                                                             directives=", ".join(f'"{p}"' for p in order)))
            (src / "go.mod").write_text(f"module skyrack.invalid/coredns-build\n\ngo {b.go}\n\n"
                                        f"require github.com/coredns/coredns {b.coredns}\n")
            go.build(["-mod=mod", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "bin/coredns"), "."], src, entry, log, say)
            proc = subprocess.run([str(out / "bin/coredns"), "-plugins"], capture_output=True, text=True,
                                  timeout=60, check=False)
            # one plugin a line; CoreDNS before 1.12 printed them as "dns.<name>"
            listed = {line.strip().removeprefix("dns.") for line in proc.stdout.splitlines()}
            missing = [p for p in order if p not in listed]
            if missing:
                raise BuildError(f"coredns {b.coredns}: built without plugins {missing}; see {log.name}")
            shutil.rmtree(src)
    return ensure(entry, build, say)


def pause(b: KubernetesBuild, say: Say) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    entry = component_entry("pause", b.pause, b, cc="static")

    def build(out: Path) -> None:
        if cc is None:
            raise BuildError("pause: no C compiler (cc) on this machine; install gcc (build-essential)")
        with entry.log().open("w") as log:
            info = go.download(f"k8s.io/kubernetes@{b.tag}", entry, log)
            source = Path(info["Dir"]) / "build/pause/linux/pause.c"
            (out / "bin").mkdir()
            cmd = [cc, "-Os", "-Wall", "-Werror", "-static", f'-DVERSION=v{b.pause}-skyrack', "-o",
                   str(out / "bin/pause"), str(source)]
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            if subprocess.run(cmd, stdout=log, stderr=log, check=False).returncode != 0:
                raise BuildError(f"pause {b.pause}: compiling {source} failed; see {log.name}")
            subprocess.run(["strip", str(out / "bin/pause")], check=False)
    return ensure(entry, build, say)


def all_binaries(b: KubernetesBuild, say: Say) -> Binaries:
    """Build (or find in the cache) every program a cluster of version `b` runs. Not KWOK: only a simulated
    fleet runs it (`kwok()`, built on the fleet's first `lab fleet up` or by `skyrack lab build`)."""
    go.require_go()
    return Binaries(kubernetes=kubernetes(b, say), coredns=coredns(b, say), pause=pause(b, say),
                    containerd=programs.build(programs.CONTAINERD, say), etcd=programs.build(programs.ETCD, say),
                    prometheus=programs.build(programs.PROMETHEUS, say))
