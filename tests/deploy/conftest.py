"""Fixtures for the deployment tests: the helm binary, TLS material, rendered variants."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster import BinariesUnavailable
from localcluster.chart import find_helm, render_manifests
from tests.deploy.helpers import (
    FAKE_VALUES,
    STANDALONE_VALUES,
    TlsMaterial,
    make_tls,
    tls_values,
)


@pytest.fixture(scope="session")
def helm_available() -> None:
    """Skip when helm cannot be found or built (``GPUTOPO_SKIP_E2E=1``, no Go toolchain)."""
    try:
        find_helm()
    except BinariesUnavailable as exc:
        pytest.skip(f"helm unavailable: {exc}")


@pytest.fixture(scope="session")
def tls() -> TlsMaterial:
    return make_tls()


@pytest.fixture(scope="session")
def variants(helm_available: None, tls: TlsMaterial) -> dict[str, list[dict[str, Any]]]:
    """Rendered objects of the chart per variant: default (the extender a sidecar of the
    scheduler pods), standalone (its own Deployment), tls (standalone over HTTPS), fake (fake
    topologies)."""
    return {
        "default": render_manifests(),
        "standalone": render_manifests(STANDALONE_VALUES),
        "tls": render_manifests(tls_values(tls)),
        "fake": render_manifests(FAKE_VALUES),
    }
