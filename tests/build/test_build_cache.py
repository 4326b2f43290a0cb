"""The build cache (skyrack.build.cache) and a failing build: no half-written entry, one clear error."""

from __future__ import annotations

import dataclasses
import json

import pytest

from skyrack import upstream
from skyrack.build import cache
from skyrack.build import kubernetes as k8s


def entry(tmp_path, recipe=None) -> cache.Entry:
    return cache.Entry("demo", "v1", recipe or {"n": 1}, root=tmp_path)


def test_a_second_run_builds_nothing(tmp_path):
    calls = []

    def build(out):
        calls.append(out)
        (out / "artifact").write_text("x")

    path = cache.ensure(entry(tmp_path), build, say=lambda _m: None)
    assert (path / "artifact").read_text() == "x"
    assert cache.ensure(entry(tmp_path), build, say=lambda _m: None) == path
    assert len(calls) == 1
    meta = json.loads((path / "meta.json").read_text())
    assert meta["component"] == "demo" and meta["bytes"] == 1
    assert cache.history(tmp_path)["demo"] >= 0


def test_a_failed_build_leaves_no_entry_and_the_next_one_starts_clean(tmp_path):
    def broken(out):
        (out / "half").write_text("half-written")
        raise cache.BuildError("demo v1: compiling failed; see demo.log")

    with pytest.raises(cache.BuildError, match="demo v1: compiling failed"):
        cache.ensure(entry(tmp_path), broken, say=lambda _m: None)
    assert not entry(tmp_path).ready()
    assert list((tmp_path / "build" / "demo").iterdir()) == [tmp_path / "build/demo/.lock"]
    path = cache.ensure(entry(tmp_path), lambda out: (out / "ok").write_text("ok"), say=lambda _m: None)
    assert sorted(p.name for p in path.iterdir()) == ["meta.json", "ok"]


def test_a_new_recipe_of_the_same_version_replaces_the_old_entry(tmp_path):
    old = cache.ensure(entry(tmp_path, {"n": 1}), lambda out: None, say=lambda _m: None)
    new = cache.ensure(entry(tmp_path, {"n": 2}), lambda out: None, say=lambda _m: None)
    assert new != old and new.exists() and not old.exists()


def test_an_unbuildable_version_fails_with_the_component_and_its_log(tmp_path, monkeypatch):
    """A version the Go module proxy does not have: one line naming what failed and where its log is."""
    monkeypatch.setattr(cache, "ROOT", tmp_path)
    bogus = dataclasses.replace(upstream.KUBERNETES_BUILDS["1.37.2"], version="1.37.999")
    monkeypatch.setattr(k8s, "component_entry", lambda c, v, b, **kw: cache.Entry(c, v, {"k": b.version, **kw}, root=tmp_path))
    with pytest.raises(cache.BuildError) as exc:
        k8s.kubernetes(bogus, say=lambda _m: None)
    message = str(exc.value)
    assert message.startswith("kubernetes v1.37.999: downloading k8s.io/kubernetes@v1.37.999 failed")
    log = tmp_path / "build/logs/kubernetes-v1.37.999.log"
    assert f"see {log}" in message and log.exists()
    assert not any((tmp_path / "build/kubernetes").glob("v1.37.999-*/meta.json"))


def test_the_engine_built_is_the_release_of_the_pinned_and_installed_sdks():
    """pulumi up runs the built CLI and provider with the installed Python SDKs: the same releases."""
    import tomllib
    from importlib.metadata import version

    from skyrack.upstream import PULUMI
    from support import ROOT

    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["pulumi"]
    assert f"pulumi=={PULUMI.version}" in [p.split("#")[0].strip() for p in pins]
    assert f"pulumi-kubernetes=={PULUMI.kubernetes}" in [p.split("#")[0].strip() for p in pins]
    assert version("pulumi") == PULUMI.version and version("pulumi-kubernetes") == PULUMI.kubernetes


def test_the_workflows_install_the_same_pulumi_release():
    import yaml

    from skyrack.upstream import PULUMI
    from support import ROOT

    seen = 0
    for wf in sorted((ROOT / ".github" / "workflows").glob("*.yml")):
        for job in yaml.safe_load(wf.read_text())["jobs"].values():
            for step in job.get("steps", []):
                if str(step.get("uses", "")).startswith("pulumi/actions@"):
                    seen += 1
                    assert str(step.get("with", {}).get("pulumi-version")) == PULUMI.version, wf.name
    assert seen >= 3


def test_two_builds_at_once_make_one_signing_key(tmp_path):
    """`./dev test` builds in the background while a test may build too: the repository's signing key is made
    once, by one of them, and both get it (before, the second removed the first's half-made key)."""
    import shutil
    import subprocess
    import sys

    if shutil.which("gpg") is None:
        pytest.skip("gpg is not installed (scripts/apt-packages.txt)")
    code = ("import sys; from pathlib import Path; from skyrack.build import debs; "
            "home = debs.signing_home(Path(sys.argv[1])); "
            "print(sorted(p.name for p in (home / 'private-keys-v1.d').glob('*.key')))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    home = tmp_path / "build/apt-signing-key"
    try:
        results = [p.communicate(timeout=120) for p in procs]
        # gpg starts an agent for the home directory; the build stops it: no daemon is left behind
        agents = subprocess.run(["pgrep", "-f", f"gpg-agent --homedir {home}"], capture_output=True, text=True,
                                check=False).stdout.split()
    finally:  # on failure, this test's agent goes with it all the same
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)
    assert [p.returncode for p in procs] == [0] * 8, [err for _, err in results]
    assert agents == [], agents
    keys = {out for out, _ in results}
    assert len(keys) == 1 and keys.pop().count(".key") == 1  # one key, the same for every caller
