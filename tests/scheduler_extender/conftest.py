"""Fixtures of the extender tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from scheduler_extender.state import MemoryState
from tests.scheduler_extender.helpers import fixture_state, make_client


@pytest.fixture
def state() -> MemoryState:
    return fixture_state()


@pytest.fixture
def client(state: MemoryState) -> Iterator[TestClient]:
    with make_client(state) as c:
        yield c
