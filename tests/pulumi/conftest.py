"""Fixtures: each shipped environment's stack run once under mocks (each run in a fresh runtime)."""

from __future__ import annotations

import pytest
from pulumi_harness import StackRun, run_stack


@pytest.fixture(scope="session")
def dev() -> StackRun:
    return run_stack("dev")


@pytest.fixture(scope="session")
def prod() -> StackRun:
    return run_stack("prod")


@pytest.fixture(params=["dev", "prod"])
def stack(request: pytest.FixtureRequest) -> StackRun:
    return request.getfixturevalue(request.param)
