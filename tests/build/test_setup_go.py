"""./dev's Go: the machine's when new enough, else Go's own toolchain module installed into the tools cache.

scripts/setup-go.sh runs for real: with a `go` on PATH that calls itself Debian 12's 1.19 it downloads
the golang.org/toolchain module through the machine's Go module proxy, installs it, and the installed
toolchain compiles a program; a second run installs nothing; a new enough `go` is used as it is.
skyrack.build finds the installed toolchain when `go` is not on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from skyrack.build import go as gomod
from support import ROOT, need

SCRIPT = ROOT / "scripts" / "setup-go.sh"


def machine_go() -> str:
    go = shutil.which("go")
    if go is None:
        need("no Go on this machine to fetch the toolchain module with (./dev installs one)")
    return str(go)


def run(path: list[Path | str], tools: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GO") and k != "PATH"}
    return subprocess.run([str(SCRIPT)], env={**clean, "PATH": os.pathsep.join(map(str, path)),
                                               "TOOLS_CACHE": str(tools), **env},
                          capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture
def old_go(tmp_path: Path) -> Path:
    """A directory whose `go` reports Debian 12's version and otherwise is the machine's Go."""
    shim = tmp_path / "old-go"
    shim.mkdir()
    (shim / "go").write_text(f'#!/bin/sh\n[ "$1 $2" = "env GOVERSION" ] && {{ echo go1.19.8; exit 0; }}\n'
                             f'exec {machine_go()} "$@"\n')
    (shim / "go").chmod(0o755)
    return shim


def test_an_old_go_gets_the_toolchain_module_installed_once(old_go: Path, tmp_path: Path):
    tools = tmp_path / "tools"
    want = os.environ.get("GO_TOOLCHAIN", "1.26.8")
    proc = run([old_go, "/usr/bin", "/bin"], tools)
    assert proc.returncode == 0, proc.stderr
    bindir = Path(proc.stdout.strip())
    assert bindir == tools / f"go-{want}" / "bin"
    assert f"Go 1.19.8 is older than 1.26.6: installing Go {want}" in proc.stderr
    # the installed toolchain works on its own: it compiles and runs a program
    hello = tmp_path / "hello"
    hello.mkdir()
    (hello / "go.mod").write_text("module hello\n\ngo 1.26\n")
    (hello / "main.go").write_text('package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("built") }\n')
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GOTOOLCHAIN": "local", "GOCACHE": str(tmp_path / "c"),
           "GOPATH": str(tmp_path / "p"), "GOFLAGS": "-mod=mod"}
    built = subprocess.run([str(bindir / "go"), "run", "."], cwd=hello, env=env, capture_output=True, text=True,
                           timeout=600)
    assert (built.returncode, built.stdout) == (0, "built\n"), built.stderr
    assert not list(tools.glob("*.partial-*")), "a partial install was left behind"
    # again: nothing downloaded, the same directory
    again = run([old_go, "/usr/bin", "/bin"], tools)
    assert again.returncode == 0 and Path(again.stdout.strip()) == bindir and "installing" not in again.stderr
    # skyrack.build finds it when there is no go on PATH
    saved = os.environ.get("PATH"), os.environ.get("SKYRACK_TOOLS_CACHE")
    os.environ.update(PATH="/usr/bin:/bin", SKYRACK_TOOLS_CACHE=str(tools))
    try:
        assert gomod.require_go() == str(bindir / "go")
    finally:
        for key, value in zip(("PATH", "SKYRACK_TOOLS_CACHE"), saved, strict=True):
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_a_new_enough_go_is_used_as_it_is(tmp_path: Path):
    go = Path(machine_go())
    proc = run([go.parent, "/usr/bin", "/bin"], tmp_path / "tools", GO_MIN="1.20")
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == go.parent and not (tmp_path / "tools").exists()


def test_no_go_anywhere_is_one_clear_build_error(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("SKYRACK_TOOLS_CACHE", str(tmp_path))
    with pytest.raises(gomod.BuildError, match=r"`go` is not on PATH, none in .*`./dev setup` installs Go"):
        gomod.require_go()


def test_the_setup_scripts_pass_shellcheck():
    if shutil.which("shellcheck") is None:
        need("shellcheck is not installed (scripts/apt-packages.txt)")
    scripts = [ROOT / "dev", *sorted((ROOT / "scripts").glob("*.sh"))]
    proc = subprocess.run(["shellcheck", *map(str, scripts)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout
