"""Shared test configuration."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from localcluster import Binaries, BinariesUnavailable, find_binaries
from localcluster.chart import find_helm

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="module")
def binaries() -> Binaries:
    """The control-plane binaries and helm (built on first use; ``GpuCluster`` renders the
    chart with helm); the test is skipped, with the reason, only when they cannot be had
    (``GPUTOPO_SKIP_E2E`` set, or no Go toolchain)."""
    try:
        found = find_binaries()
        find_helm()
        return found
    except BinariesUnavailable as exc:
        pytest.skip(f"control-plane binaries unavailable: {exc}")
