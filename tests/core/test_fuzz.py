"""Fuzzing: no bytes, no YAML and no edit of a real environment makes skyrack raise anything but InputError.

Three generators: arbitrary bytes (as an environment file, a lock file and an outputs file),
arbitrary YAML documents, and the shipped dev environment with one value anywhere replaced by
an arbitrary one (the edits a pull request makes). The last also goes through the command line
in-process (`validate`, `plan --json`, `inventory --json`): every exit is 0 or 1, never an exception.
"""

from __future__ import annotations

import ipaddress
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from skyrack import cli, config, inventory
from skyrack import outputs as contract
from skyrack import plan as planmod
from skyrack.errors import InputError
from support import CONFIGS

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEV = yaml.safe_load((CONFIGS / "dev.yaml").read_text())

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
    st.text(max_size=40),
    st.sampled_from(["10.0.0.0/8", "0.0.0.0/0", "255.255.255.255", "{{ 7 * 7 }}", "{rack}-{index:>99}", "[/]",
                     "yes", "auto", "1.31.2", "r01", "\x1b[2J", "http://m:3142", "a" * 300, "-1", "1e400"]),
)
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.one_of(st.text(max_size=10), st.integers()), inner, max_size=5)),
    max_leaves=30)


def paths_of(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths_of(v, (*prefix, i))
    return out


DEV_PATHS = [p for p in paths_of(DEV) if p]


def replaced(data: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(data, dict):
        return {**data, head: replaced(data[head], rest, value)}
    copy = list(data)
    copy[head] = replaced(data[head], rest, value)
    return copy


def only_input_errors(fn) -> Any:
    try:
        return fn()
    except InputError as exc:
        assert exc.problems and all(p.file for p in exc.problems)
        return None


def workdir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="skyrack-fuzz-"))
    shutil.copy(CONFIGS / "dev.lock.yaml", d / "dev.lock.yaml")
    return d


@FAST
@given(st.binary(max_size=2000))
def test_arbitrary_bytes(data: bytes) -> None:
    d = workdir()
    try:
        for name in ("dev.yaml", "dev.lock.yaml", "outputs.json"):
            (d / name).write_bytes(data)
        only_input_errors(lambda: config.load(d / "dev.yaml"))
        only_input_errors(lambda: planmod.read_lock(d / "dev.yaml"))
        only_input_errors(lambda: contract.load(d / "outputs.json"))
        for args in (["validate", str(d / "dev.yaml")], ["plan", str(d / "dev.yaml")],
                     ["inventory", "--outputs", str(d / "outputs.json"), "configs/dev.yaml"]):
            result = CliRunner().invoke(cli.app, args)
            assert result.exit_code in (0, 1) and (result.exception is None or isinstance(result.exception, SystemExit))
    finally:
        shutil.rmtree(d)


def reference_span(text: str) -> tuple[int, int, int] | None:
    try:
        net = ipaddress.IPv4Network(text, strict=True)
    except ValueError:
        return None
    return int(net.network_address), int(net.broadcast_address), net.prefixlen


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=20),
                 st.builds(lambda a, p: f"{a}/{p}", st.ip_addresses(v=4), st.integers(-1, 33)),
                 st.from_regex(r"[0-9١]{1,4}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}/[0-9]{1,2}", fullmatch=True)))
def test_the_lock_reader_parses_cidrs_as_ipaddress_does(text: str) -> None:
    assert planmod._span(text) == reference_span(text)


@FAST
@given(documents)
def test_arbitrary_yaml(doc: Any) -> None:
    text = yaml.safe_dump(doc)
    only_input_errors(lambda: config.load(Path("dev.yaml"), text))
    only_input_errors(lambda: planmod.read_lock(Path("dev.yaml"), text))
    if isinstance(doc, dict):
        only_input_errors(lambda: contract.validate(doc, "outputs.json", contract.JOIN_REQUIRED))


@FAST
@given(st.sampled_from(DEV_PATHS), documents)
def test_one_edit_of_a_real_environment(path: tuple, value: Any) -> None:
    d = workdir()
    try:
        env_path = d / "dev.yaml"
        env_path.write_text(yaml.safe_dump(replaced(DEV, path, value), sort_keys=False))
        env = only_input_errors(lambda: config.load(env_path))
        if env is not None:
            p = only_input_errors(lambda: planmod.build(env, env_path, planmod.read_lock(env_path)))
            if p is not None:
                inventory.dump_yaml(inventory.static(p))
        runner = CliRunner()
        for args in (["validate", str(env_path)], ["plan", "--json", str(env_path)],
                     ["inventory", "--json", str(env_path)]):
            result = runner.invoke(cli.app, args)
            assert result.exit_code in (0, 1), (args, result.output, result.exception)
            assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    finally:
        shutil.rmtree(d)
