"""Running the Pulumi engine skyrack builds (skyrack.build.pulumi), offline, with a local state backend.

A `Workspace` is one place where stacks live: a file backend (`pulumi login file://...`),
the engine's home (`PULUMI_HOME`), the stacks' config files, and a passphrase file for the
stacks' secrets (created once, 0600, never on a command line or in the environment's
values; Pulumi reads it through `PULUMI_CONFIG_PASSPHRASE_FILE`). Every run is offline: the
built plugins are on PATH and nothing is downloaded, no update check.

`run` streams Pulumi's own output and, when it fails, raises `EngineError` with the lines
that say why (Pulumi's `error:` lines) translated into what to do where skyrack knows.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .build.pulumi import Engine
from .files import write_private

ORGANIZATION = "organization"  # the diy backend's one organization
# Subcommands that take a stack's config file (`--config-file`): the workspace keeps it, not the checkout.
CONFIG_FILE_COMMANDS = frozenset({"up", "preview", "destroy", "refresh", "config", "import"})
Say = Callable[[str], None]


class EngineError(RuntimeError):
    """A Pulumi command failed; the message says why, in one line where it can."""


@dataclass(frozen=True)
class Workspace:
    engine: Engine
    root: Path  # state/, home/, config/, passphrase

    @property
    def backend(self) -> Path:
        return self.root / "state"

    @property
    def passphrase_file(self) -> Path:
        return self.root / "passphrase"

    def config_file(self, project: str, stack: str) -> Path:
        return self.root / "config" / f"{project}.{stack}.yaml"

    def create(self) -> Workspace:
        """The directories (0700) and a new random passphrase, once; idempotent."""
        for d in (self.root, self.backend, self.root / "home", self.root / "config"):
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o700)
        if not self.passphrase_file.exists():
            write_private(self.passphrase_file, secrets.token_urlsafe(32) + "\n")
        return self

    def env(self) -> dict[str, str]:
        """The environment every Pulumi command runs in (no secret values in it: the passphrase is a file)."""
        python_bin = str(Path(sys.executable).parent)
        return {
            "PATH": os.pathsep.join([self.engine.path, python_bin, os.environ.get("PATH", "/usr/bin:/bin")]),
            "PULUMI_HOME": str(self.root / "home"),
            "PULUMI_BACKEND_URL": f"file://{self.backend}",
            "PULUMI_CONFIG_PASSPHRASE_FILE": str(self.passphrase_file),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_PYTHON_CMD": sys.executable,
        }

    def exports(self) -> str:
        """Shell lines that give an interactive shell this workspace (`eval "$(skyrack lab env)"`)."""
        return (f"# stacks' config files: {self.root / 'config'}/<project>.<stack>.yaml (pass --config-file)\n"
                + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.env().items()))

    def stack_exists(self, project: str, stack: str) -> bool:
        return (self.backend / ".pulumi" / "stacks" / project / f"{stack}.json").is_file()

    def run(self, project_dir: Path, args: Sequence[str], *, stack: str, project: str, say: Say | None = None,
            timeout: float = 3600, what: str = "pulumi") -> str:
        """`pulumi <args> -s <stack>` in `project_dir`: its stdout, EngineError on failure.

        With `say`, Pulumi's output (stdout and stderr, as it comes) is streamed to it; without,
        stdout is returned apart from the diagnostics (what `--json` needs)."""
        cmd = [str(self.engine.pulumi), *args, "--stack", stack, "--non-interactive"]
        if args and args[0] in CONFIG_FILE_COMMANDS:
            cmd += ["--config-file", str(self.config_file(project, stack))]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")} | self.env()
        if say is None:
            done = subprocess.run(cmd, cwd=project_dir, env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
            code, out, diagnostics = done.returncode, done.stdout, done.stdout + "\n" + done.stderr
        else:
            code, out = _streamed(cmd, project_dir, env, say, timeout)
            diagnostics = out
        if code != 0:
            raise EngineError(f"{what}: {explain(diagnostics, self, stack)}")
        return out

    def ensure_stack(self, project_dir: Path, project: str, stack: str) -> None:
        """Create the stack once. `pulumi stack init` writes the stack's config file (its secrets' salt) beside
        Pulumi.yaml and has no --config-file: it runs on a copy of Pulumi.yaml here, and the file it wrote
        becomes the workspace's config file of the stack, so nothing lands in the checkout."""
        if self.stack_exists(project, stack):
            return
        scratch = self.root / "init"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(mode=0o700)
        try:
            shutil.copy(project_dir / "Pulumi.yaml", scratch / "Pulumi.yaml")
            self.run(scratch, ["stack", "init"], stack=stack, project=project, what=f"creating stack {stack}")
            written = scratch / f"Pulumi.{stack}.yaml"
            target = self.config_file(project, stack)
            if written.exists():
                written.replace(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def set_config(self, project_dir: Path, project: str, stack: str, values: dict[str, str]) -> None:
        for key, value in values.items():
            self.run(project_dir, ["config", "set", key, value], stack=stack, project=project,
                     what=f"setting {key} on stack {stack}")


def _streamed(cmd: list[str], cwd: Path, env: dict[str, str], say: Say, timeout: float) -> tuple[int, str]:
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            say(lines[-1])
        code = proc.wait(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return code, "\n".join(lines)


_ERROR = re.compile(r"^\s*error: (.*)$", re.MULTILINE)


def explain(output: str, ws: Workspace, stack: str) -> str:
    """What went wrong, from Pulumi's output: its error lines, with the fix where skyrack knows it."""
    if "incorrect passphrase" in output or "failed to decrypt" in output:
        return (f"the passphrase in {ws.passphrase_file} does not open stack {stack} in {ws.backend} "
                f"(was the file replaced?): put the original back, or remove the workspace {ws.root} "
                f"and create the stacks again")
    errors = [e.strip() for e in _ERROR.findall(output)]
    noise = ("update failed", "preview failed", "destroy failed", "an unhandled error occurred: program exited")
    errors = [e for e in errors if e and not e.lower().startswith(noise)] or errors
    return "; ".join(dict.fromkeys(errors)) or (output.strip().splitlines() or ["failed without a message"])[-1]
