"""Fixtures of the device-plugin tests."""

from __future__ import annotations

import pytest

from tests.device_plugin.helpers import MACHINE
from topology import catalog
from topology.model import Topology


@pytest.fixture
def topo() -> Topology:
    """The DGX-1 (V100) catalog machine."""
    return catalog.get(MACHINE)
