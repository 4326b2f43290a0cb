"""Bad input stops the program before any resource is registered, with the validator's message."""

from __future__ import annotations

import pulumi
import pytest
from harness import DEFAULT_CONFIG, AzureMocks, run_stack


def test_invalid_environment_registers_nothing(env_copy) -> None:
    path = env_copy("dev")
    path.write_text(path.read_text().replace("etcd: {count: 3,", "etcd: {count: 4,"))
    mocks = AzureMocks()
    with pytest.raises(pulumi.RunError) as err:
        run_stack("dev", path.parent, mocks=mocks)
    assert f"{path.parent / 'dev.yaml'}: control_plane.etcd.count: 4 is even" in str(err.value)
    assert mocks.resources == []


def test_unreviewed_pod_ranges_register_nothing(env_copy) -> None:
    path = env_copy("dev")
    last = "- {name: r01-n04, ip: 10.64.1.14}"
    path.write_text(path.read_text().replace(last, last + "\n      - {name: r01-n05, ip: 10.64.1.15}"))
    mocks = AzureMocks()
    with pytest.raises(pulumi.RunError, match=r"dev.lock.yaml: out of date: 1 without a pod range \(r01-n05\)"):
        run_stack("dev", path.parent, mocks=mocks)
    assert mocks.resources == []


def test_missing_kubernetes_repository_registers_nothing() -> None:
    mocks = AzureMocks()
    expected = r"mirrors\.kubernetes: not set, and stack config skyrack:kubernetesAptRepo"
    with pytest.raises(pulumi.RunError, match=expected):
        run_stack("dev", config={}, mocks=mocks)
    assert mocks.resources == []
    assert DEFAULT_CONFIG  # the other tests run with the repository set


def test_prod_takes_its_repository_from_the_environment() -> None:
    run = run_stack("prod", config={})
    assert run.outputs["apiserver_endpoint"].startswith("https://")
