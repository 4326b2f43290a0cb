"""The Pulumi engine from its Go modules: the CLI, the Python language host, the Kubernetes provider.

skyrack's stacks run on the real engine (`pulumi up`), not only under the SDK's mocks. The
machines have no download site, so the engine is built like Kubernetes is (skyrack.build.go,
cached per recipe under /var/cache/skyrack/build/):

* **pulumi** (`github.com/pulumi/pulumi/pkg/v3/cmd/pulumi`) at the Python SDK's release, from a
  wrapper module that requires pkg/v3 and sdk/v3 at that release (pkg's go.mod points sdk/v3 at
  `../sdk`) and copies pkg's versioned replaces; the version is stamped as a release build does.
* **pulumi-language-python**: its module has no tags, so the wrapper requires the pseudo-version
  `skyrack.upstream.PULUMI` names and points its relative replaces (`../../..`) at that commit's
  release. Beside it goes `pulumi-language-python-exec`, the script in the sdk/v3 module zip of
  the Python SDK's own release.
* **pulumi-resource-pulumi-python**: the host of Python dynamic providers (skyrack's PKI provider in the
  Azure stack is one), the script upstream's release ships beside the language host, from the same
  sdk/v3 module zip.
* **pulumi-resource-kubernetes**: a writable copy of the provider module; its embedded schema is
  generated (upstream's `generate.go`, with `VERSION`) before the build, since the module zip does
  not carry it. It builds against the pkg/sdk releases of its own go.mod: its code does not
  compile against the CLI's newer pkg/v3.

`Engine.env()` is how every caller runs it offline: plugins from this directory only (no plugin
download, no update check), see skyrack.engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..upstream import PulumiBuild
from . import go
from .cache import BuildError, Entry, Say, ensure

RECIPE_VERSION = 1
PKG = "github.com/pulumi/pulumi/pkg/v3"
SDK = "github.com/pulumi/pulumi/sdk/v3"
LANGUAGE_PYTHON = "github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3"
K8S_PROVIDER = "github.com/pulumi/pulumi-kubernetes/provider/v4"
K8S_SDK = "github.com/pulumi/pulumi-kubernetes/sdk/v4"
TAGS = "osusergo"  # as upstream's release builds (the provider too: the same tags share compiled packages)


@dataclass(frozen=True)
class Engine:
    """Where the built engine is: one bin/ directory per component, all on PATH together."""

    build: PulumiBuild
    dirs: tuple[Path, ...]

    @property
    def pulumi(self) -> Path:
        return self.dirs[0] / "pulumi"

    @property
    def path(self) -> str:
        return os.pathsep.join(str(d) for d in self.dirs)


def _entry(component: str, version: str, b: PulumiBuild, **extra: object) -> Entry:
    return Entry(component, version, {"recipe": RECIPE_VERSION, "go": go.version(), "pulumi": b.version,
                                      "tags": TAGS, **extra})


def _versioned_replaces(gomod: str, entry: Entry, log) -> list[str]:
    """`-replace` flags for upstream's replaces that name a published version (relative ones are re-pointed)."""
    data = json.loads(go.run(["mod", "edit", "-json", gomod], Path("/"), entry, log, f"reading {gomod}"))
    return [f"-replace={r['Old']['Path']}={r['New']['Path']}@{r['New']['Version']}"
            for r in data.get("Replace") or [] if r["New"].get("Version")]


def _wrapper(src: Path, name: str, go_line: str, requires: list[str], replaces: list[str], entry: Entry, log) -> None:
    src.mkdir(parents=True)
    (src / "go.mod").write_text(f"module skyrack.invalid/{name}\n\ngo {go_line}\n")
    go.run(["mod", "edit", *[f"-require={r}" for r in requires], *replaces], src, entry, log, "writing the wrapper module")


def _writable_copy(source: str, dest: Path) -> None:
    shutil.copytree(source, dest, symlinks=True)
    for root, dirs, files in os.walk(dest):  # the module cache is read-only
        for n in dirs + files:
            p = Path(root) / n
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | 0o200)
    dest.chmod(0o755)


def _check(cmd: list[str], want: str, entry: Entry, log) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    log.write(f"{' '.join(cmd)}: {proc.stdout.strip()} {proc.stderr.strip()}\n")
    if want not in proc.stdout:
        raise BuildError(f"{entry.component} {entry.version}: {Path(cmd[0]).name} reports "
                         f"{(proc.stdout or proc.stderr).strip()!r}, not {want}; see {log.name}")


def cli(b: PulumiBuild, say: Say) -> Path:
    entry = _entry("pulumi", b.tag, b)

    def build(out: Path) -> None:
        with entry.log().open("w") as log:
            info = go.download(f"{PKG}@{b.tag}", entry, log)
            src = out / "src"
            _wrapper(src, "pulumi-build", b.go, [f"{PKG}@{b.tag}", f"{SDK}@{b.tag}"],
                     _versioned_replaces(info["GoMod"], entry, log), entry, log)
            go.build(["-mod=mod", "-trimpath", "-tags", TAGS, "-ldflags",
                      f"-s -w -X {SDK}/go/common/version.Version={b.tag}", "-o", str(out / "bin/pulumi"),
                      f"{PKG}/cmd/pulumi"], src, entry, log, say)
            shutil.rmtree(src)
            _check([str(out / "bin/pulumi"), "version"], b.tag, entry, log)
    return ensure(entry, build, say)


def language_python(b: PulumiBuild, say: Say) -> Path:
    entry = _entry("pulumi-language-python", b.language_python, b, release=b.language_python_release,
                   sums=b.language_python_sums)

    def build(out: Path) -> None:
        with entry.log().open("w") as log:
            release = f"v{b.language_python_release}"
            src = out / "src"
            _wrapper(src, "pulumi-language-python-build", b.go,
                     [f"{LANGUAGE_PYTHON}@{b.language_python}", f"{PKG}@{release}", f"{SDK}@{release}"],
                     [f"-replace={PKG}={PKG}@{release}", f"-replace={SDK}={SDK}@{release}"], entry, log)
            # Not in the checksum database: verified against the pinned go.sum lines instead (GONOSUMDB for
            # this module only; go still refuses a download whose hash differs from go.sum).
            zip_sum, mod_sum = b.language_python_sums
            (src / "go.sum").write_text(f"{LANGUAGE_PYTHON} {b.language_python} {zip_sum}\n"
                                        f"{LANGUAGE_PYTHON} {b.language_python}/go.mod {mod_sum}\n")
            env = {**go.go_env(entry.root), "GONOSUMDB": LANGUAGE_PYTHON}
            info = json.loads(go.run(["mod", "download", "-json", f"{LANGUAGE_PYTHON}@{b.language_python}"], src,
                                     entry, log, f"downloading {LANGUAGE_PYTHON}", env=env))
            if info.get("Error"):
                raise BuildError(f"{entry.component} {entry.version}: {info['Error']}")
            go.run(["mod", "edit", *_versioned_replaces(info["GoMod"], entry, log)], src, entry, log,
                   "copying upstream's versioned replaces")
            go.build(["-mod=mod", "-trimpath", "-tags", TAGS, "-ldflags",
                      f"-s -w -X {SDK}/go/common/version.Version={release}", "-o",
                      str(out / "bin/pulumi-language-python"), LANGUAGE_PYTHON], src, entry, log, say, env=env)
            shutil.rmtree(src)
            _sdk_script(b, "python/cmd/pulumi-language-python-exec", out / "bin", entry, log)
    return ensure(entry, build, say)


def dynamic_provider(b: PulumiBuild, say: Say) -> Path:
    """`pulumi-resource-pulumi-python`: a script (it runs `python -m pulumi.dynamic`), nothing to compile."""
    entry = _entry("pulumi-resource-pulumi-python", b.tag, b)

    def build(out: Path) -> None:
        with entry.log().open("w") as log:
            _sdk_script(b, "python/dist/pulumi-resource-pulumi-python", out / "bin", entry, log)
    return ensure(entry, build, say)


def _sdk_script(b: PulumiBuild, path: str, bin_dir: Path, entry: Entry, log) -> None:
    """Copy a script of the Python SDK's own release (the sdk/v3 module zip at its tag) into bin_dir."""
    sdk = go.download(f"{SDK}@{b.tag}", entry, log)
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / Path(path).name
    shutil.copyfile(Path(sdk["Dir"]) / path, script)
    script.chmod(0o755)


def kubernetes_provider(b: PulumiBuild, say: Say) -> Path:
    entry = _entry("pulumi-resource-kubernetes", f"v{b.kubernetes}", b, module=b.kubernetes_provider)

    def build(out: Path) -> None:
        with entry.log().open("w") as log:
            info = go.download(f"{K8S_PROVIDER}@{b.kubernetes_provider}", entry, log)
            src = out / "src"
            _writable_copy(info["Dir"], src)
            # its own pkg/sdk releases (go.mod): its code does not compile against the CLI's (PackageSpec.Provider
            # became a pointer), and sdk/v3 cannot be newer than the pkg/v3 it is built with
            go.run(["mod", "edit", f"-replace={K8S_SDK}={K8S_SDK}@v{b.kubernetes}"], src, entry, log,
                   "pointing the provider at its SDK release")
            cmd = src / "cmd/pulumi-resource-kubernetes"
            # upstream's `go generate` step, built with the provider's flags (its compiled packages are shared)
            go.build(["-mod=mod", "-trimpath", "-tags", TAGS, "-o", str(out / "generate"), "generate.go"], cmd, entry,
                     log, say)
            _generate(out / "generate", cmd, b.kubernetes, entry, log)
            go.build(["-mod=mod", "-trimpath", "-tags", TAGS, "-ldflags",
                      f"-s -w -X {K8S_PROVIDER}/pkg/version.Version={b.kubernetes}", "-o",
                      str(out / "bin/pulumi-resource-kubernetes"), "./cmd/pulumi-resource-kubernetes"],
                     src, entry, log, say)
            shutil.rmtree(src)
    return ensure(entry, build, say)


def _generate(program: Path, cwd: Path, version: str, entry: Entry, log) -> None:
    """Write schema-embed.json and terraform-mapping-embed.json beside main.go (VERSION stamps the schema)."""
    proc = subprocess.run([str(program)], cwd=cwd, env={**go.go_env(entry.root), "VERSION": version}, stdout=log,
                          stderr=log, timeout=600, check=False)
    program.unlink()
    if proc.returncode != 0 or not (cwd / "schema-embed.json").is_file():
        raise BuildError(f"{entry.component} {entry.version}: generating the embedded schema failed; see {log.name}")


def engine(b: PulumiBuild, say: Say, *, kubernetes: bool = True) -> Engine:
    """Build (or find in the cache) the CLI, the language host, the dynamic-provider host and the provider.

    `kubernetes=False` leaves the Kubernetes provider out (the longest of the four to build): what a program
    that makes no Kubernetes resource runs on, as the lab's control-plane stand-in stack (`lab up`)."""
    go.require_go()
    dirs = (cli(b, say) / "bin", language_python(b, say) / "bin", dynamic_provider(b, say) / "bin")
    return Engine(b, (*dirs, kubernetes_provider(b, say) / "bin") if kubernetes else dirs)
