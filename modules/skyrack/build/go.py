"""Running the Go toolchain for upstream's programs: offline-safe settings, progress, clear failures.

Go is only the way to build upstream's own programs (Kubernetes, containerd, etcd, CoreDNS, Receptor);
skyrack itself is Python. Modules come from the Go module proxy the machine is configured
with; compiled packages are shared through one GOCACHE under the cache root, so the
components that share Kubernetes' libraries compile them once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .cache import ROOT, BuildError, Entry, Say, fmt_seconds, history

TIMEOUT = 90 * 60  # a build that takes longer than this is stuck, not slow
PROGRESS_EVERY = 30.0


def go_env(root: Path = ROOT) -> dict[str, str]:
    """The environment every go command runs in: the machine's own toolchain, no cgo, the shared caches."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    env.update(GOTOOLCHAIN="local", CGO_ENABLED="0", GOCACHE=str(root / "go" / "build"),
               GOMODCACHE=str(root / "go" / "mod"), GOPATH=str(root / "go" / "path"), GOWORK="off")
    if "GOPROXY" in os.environ:
        env["GOPROXY"] = os.environ["GOPROXY"]
    return env


def tools_dir() -> Path:
    """Where ./dev (scripts/setup-go.sh) installs a Go toolchain when the machine has none new enough."""
    return Path(os.environ.get("SKYRACK_TOOLS_CACHE") or ROOT / "tools")


def require_go() -> str:
    """`go` on PATH, else the newest toolchain scripts/setup-go.sh installed into the tools cache."""
    go = shutil.which("go")
    if go is None:
        installed = sorted(tools_dir().glob("go-*/bin/go"),
                           key=lambda p: [int(x) for x in p.parent.parent.name[3:].split(".") if x.isdigit()])
        go = str(installed[-1]) if installed else None
    if go is None:
        raise BuildError("the Go toolchain is not installed (`go` is not on PATH, none in "
                         f"{tools_dir()}): the lab builds Kubernetes from its Go modules; `./dev setup` installs "
                         "Go, then run again")
    return go


def version() -> str:
    """`go1.26.8`: part of every recipe, since another compiler makes other binaries."""
    out = subprocess.run([require_go(), "env", "GOVERSION"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def run(args: Sequence[str], cwd: Path, entry: Entry, log, what: str, env: dict[str, str] | None = None) -> str:
    """Run one go command (logged); BuildError naming the component and its log on failure."""
    log.write(f"$ go {' '.join(args)}   (in {cwd})\n")
    log.flush()
    proc = subprocess.run([require_go(), *args], cwd=cwd, env=env or go_env(entry.root), stdout=subprocess.PIPE,
                          stderr=log, text=True, timeout=TIMEOUT, check=False)
    if proc.returncode != 0:
        raise BuildError(f"{entry.component} {entry.version}: {what} failed (exit {proc.returncode}); "
                         f"see {log.name}")
    return proc.stdout


def download(module: str, entry: Entry, log) -> dict:
    """`go mod download -json module@version`: where the module is (Dir), its go.mod (GoMod)."""
    return json.loads(run(["mod", "download", "-json", module], Path("/"), entry, log, f"downloading {module}"))


def build(args: Sequence[str], cwd: Path, entry: Entry, log, say: Say, env: dict[str, str] | None = None) -> None:
    """`go build -v ...` with a progress line every half minute: packages compiled, elapsed, an estimate."""
    last = history(entry.root).get(entry.component)
    hint = f"last build took {fmt_seconds(last)}" if last else "a first build on 2 cores takes tens of minutes"
    say(f"{entry.component} {entry.version}: compiling ({hint}; log {log.name})")
    cmd = [require_go(), "build", "-v", *args]
    log.write(f"$ {' '.join(cmd)}   (in {cwd})\n")
    log.flush()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env or go_env(entry.root), stdout=log, stderr=subprocess.PIPE,
                            text=True)
    compiled = 0
    done = threading.Event()

    def report() -> None:
        while not done.wait(PROGRESS_EVERY):
            elapsed = time.monotonic() - started
            left = f", about {fmt_seconds(max(0, last - elapsed))} left" if last and last > elapsed else ""
            say(f"{entry.component} {entry.version}: {compiled} packages compiled, "
                f"{fmt_seconds(elapsed)} elapsed{left}")

    ticker = threading.Thread(target=report, daemon=True)
    ticker.start()
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # -v names each package as it is compiled; errors come here too
            log.write(line)
            if line and not line.startswith((" ", "\t", "#", "go: ")):
                compiled += 1
        code = proc.wait(timeout=max(1, TIMEOUT - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        proc.kill()
        raise BuildError(f"{entry.component} {entry.version}: go build did not finish within "
                         f"{fmt_seconds(TIMEOUT)}; see {log.name}") from None
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        done.set()
        log.flush()
    if code != 0:
        raise BuildError(f"{entry.component} {entry.version}: go build failed (exit {code}); see {log.name}")


def ldflags_version(tag: str, minor: int) -> str:
    """The -X flags that stamp Kubernetes' version (kubeadm checks it against the cluster's)."""
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={tag}", f"-X {pkg}.gitMajor=1", f"-X {pkg}.gitMinor={minor}",
                  f"-X {pkg}.gitTreeState=clean", f"-X {pkg}.buildDate=1970-01-01T00:00:00Z"]
    return " ".join(flags)
