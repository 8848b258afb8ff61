"""The generated kubelet API bindings are fresh and faithful to the upstream protos."""

from __future__ import annotations

import re

import pytest

from device_plugin.api import api_pb2, podresources_pb2
from device_plugin.api.generate import PACKAGE_DIR, SOURCES, stale_files, strip_gogoproto


def test_committed_bindings_are_not_stale() -> None:
    """Regenerates into a temporary directory and compares byte for byte."""
    assert stale_files() == [], "run: python -m device_plugin.api.generate"


@pytest.mark.parametrize("src", SOURCES, ids=lambda s: s.target)
def test_stripping_only_removes_gogoproto(src) -> None:  # type: ignore[no-untyped-def]
    upstream = (PACKAGE_DIR / "upstream" / src.upstream).read_text()
    stripped = strip_gogoproto(upstream)
    assert "gogoproto" not in stripped

    # Putting the removed constructs back yields the upstream text: nothing else changed.
    def normal(text: str) -> list[str]:
        text = re.sub(r"\s*\[\(gogoproto\.\w+\) = \"\w+\"\]", "", text)
        return [ln for ln in text.splitlines() if "gogoproto" not in ln]

    assert normal(upstream) == stripped.splitlines()
    committed = (PACKAGE_DIR / src.target).read_text()
    assert committed.endswith(stripped)


def test_unknown_gogoproto_construct_is_an_error() -> None:
    with pytest.raises(ValueError, match="unhandled gogoproto"):
        strip_gogoproto("message X { string a = 1 [(gogoproto.nullable) = false]; }\n")


def test_wire_names_match_upstream() -> None:
    fields = {f.name: f.number for f in api_pb2.ContainerAllocateRequest.DESCRIPTOR.fields}
    assert fields == {"devices_ids": 1}
    assert api_pb2.DESCRIPTOR.package == "v1beta1"
    assert set(api_pb2.DESCRIPTOR.services_by_name) == {"Registration", "DevicePlugin"}
    assert podresources_pb2.DESCRIPTOR.package == "v1"
    methods = podresources_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"].methods_by_name
    assert {"List", "Get", "GetAllocatableResources"} <= set(methods)
