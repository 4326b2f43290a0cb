"""Check rendered `#cloud-config` user-data before it ships: cloud-init's own validator plus top-level keys.

At boot an invalid config is only a warning, so every user-data skyrack renders is checked
here, in the tests (it is a helper of the tests, not of the package):

* `cloud-init schema --config-file` (cloud-init's validator: wrong types, unknown keys
  inside a module, missing required keys, a missing header, YAML errors). cloud-init is
  not on PyPI: the Debian package is downloaded with `apt-get download` and unpacked with
  `dpkg -x` into a cache directory, and run with this interpreter (it needs jsonschema,
  configobj, jsonpatch, jinja2, pyyaml and requests: the `dev` extra has them);
* a check of the top-level keys against every key cloud-init's schema knows, which that
  validator does not make (a misspelt `write_file:` is silently ignored at boot).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from skyrack import resources

CACHE = resources.cache_dir()
PACKAGE = "cloud-init"
_KEYS = """
import json
from cloudinit.config.schema import get_schema
s = get_schema()
keys = set()
for ref in s["allOf"]:
    keys |= set(s["$defs"][ref["$ref"].rsplit("/", 1)[1]].get("properties", {}))
print(json.dumps(sorted(keys)))
"""


class CloudInitUnavailable(RuntimeError):
    """cloud-init could not be fetched from the host's Debian sources."""


@dataclass(frozen=True)
class Result:
    name: str
    ok: bool
    problems: list[str]


def cloud_init_root(cache: Path = CACHE) -> Path:
    """The unpacked Debian cloud-init (its dist-packages directory), fetched once."""
    root = cache / "cloud-init"
    lib = root / "usr/lib/python3/dist-packages"
    if (lib / "cloudinit").is_dir():
        return lib
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
        got = subprocess.run(["apt-get", "download", PACKAGE], cwd=tmp, capture_output=True, text=True, check=False)
        debs = list(Path(tmp).glob(f"{PACKAGE}_*.deb"))
        if got.returncode != 0 or not debs:
            raise CloudInitUnavailable(f"apt-get download {PACKAGE} failed: {got.stderr.strip()[-300:]}")
        unpacked = Path(tmp) / "root"
        subprocess.run(["dpkg", "-x", str(debs[0]), str(unpacked)], check=True, capture_output=True)
        (unpacked / "VERSION").write_text(debs[0].name + "\n")
        if root.exists():
            subprocess.run(["rm", "-rf", str(root)], check=True)
        unpacked.rename(root)
    return lib


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(cloud_init_root())}


@functools.cache
def known_keys() -> frozenset[str]:
    """Every top-level key some cloud-init module reads, from cloud-init's own schema."""
    out = subprocess.run([sys.executable, "-c", _KEYS], env=_env(), capture_output=True, text=True, check=True)
    return frozenset(json.loads(out.stdout))


def top_level_problems(text: str) -> list[str]:
    if not text.startswith("#cloud-config\n"):
        return ["does not start with the '#cloud-config' header line"]
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return [f"invalid YAML: {exc}"]
    if not isinstance(data, dict):
        return ["the top level is not a mapping"]
    return [f"unknown top-level key {k!r} (cloud-init ignores it)" for k in data if k not in known_keys()]


def schema_problems(text: str) -> list[str]:
    """`cloud-init schema --config-file` on the text: [] when valid, its messages otherwise."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    try:
        run = subprocess.run([sys.executable, "-m", "cloudinit.cmd.main", "schema", "--config-file", f.name],
                             env=_env(), capture_output=True, text=True, check=False)
    finally:
        os.unlink(f.name)
    if run.returncode == 0:
        return []
    return [line.replace(f.name, "user-data") for line in (run.stderr + run.stdout).strip().splitlines()[-5:]]


def check(name: str, text: str) -> Result:
    problems = top_level_problems(text) + schema_problems(text)
    return Result(name, not problems, problems)


def check_all(user_data: dict[str, str]) -> list[Result]:
    return [check(name, text) for name, text in sorted(user_data.items())]


if __name__ == "__main__":  # `python -m userdata_check FILE...` (tests/ on the path) (and with no file: fetch cloud-init only)
    print(f"cloud-init: {cloud_init_root()}", file=sys.stderr)
    bad = [r for r in check_all({p: Path(p).read_text() for p in sys.argv[1:]}) if not r.ok]
    for r in bad:
        print(f"{r.name}: " + "; ".join(r.problems))
    sys.exit(1 if bad else 0)
