"""The DRA driver's generated kubelet bindings: fresh, faithful to the vendored upstream protos,
and (when the Go module cache has it) the vendored copies are k8s.io/kubelet@v0.36.3's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dra_driver.api import DRA_SERVICES, dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_pb2
from dra_driver.api.generate import PACKAGE_DIR, SOURCES, UPSTREAM_MODULE, stale_files


def test_committed_bindings_are_not_stale() -> None:
    assert stale_files() == [], "run: python -m dra_driver.api.generate"


def test_wire_names_match_upstream() -> None:
    assert dra_v1_pb2.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert dra_v1beta1_pb2.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1beta1"
    for mod in (dra_v1_pb2, dra_v1beta1_pb2):
        svc = mod.DESCRIPTOR.services_by_name["DRAPlugin"]
        assert set(svc.methods_by_name) == {"NodePrepareResources", "NodeUnprepareResources"}
    fields = {f.name: f.number for f in dra_v1_pb2.Device.DESCRIPTOR.fields}
    assert fields == {"request_names": 1, "pool_name": 2, "device_name": 3,
                      "cdi_device_ids": 4, "share_id": 5}
    assert "share_id" not in {f.name for f in dra_v1beta1_pb2.Device.DESCRIPTOR.fields}
    assert pluginregistration_pb2.DESCRIPTOR.package == "pluginregistration"
    assert set(pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"]
               .methods_by_name) == {"GetInfo", "NotifyRegistrationStatus"}
    assert DRA_SERVICES == ("v1.DRAPlugin", "v1beta1.DRAPlugin")
    from dra_driver.api import dra_health_pb2

    assert dra_health_pb2.DESCRIPTOR.package == "v1alpha1"
    assert set(dra_health_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"]
               .methods_by_name) == {"NodeWatchResources"}


def _module_dir() -> Path | None:
    try:
        out = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True,
                             timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    d = Path(out) / UPSTREAM_MODULE
    return d if d.is_dir() else None


@pytest.mark.parametrize("src", SOURCES, ids=lambda s: s.target)
def test_vendored_copies_are_upstream_verbatim(src) -> None:  # type: ignore[no-untyped-def]
    module = _module_dir()
    if module is None:
        pytest.skip(f"{UPSTREAM_MODULE} is not in the Go module cache")
    assert (PACKAGE_DIR / "upstream" / src.upstream).read_bytes() == (
        module / src.upstream_path).read_bytes()
