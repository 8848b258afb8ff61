"""Regenerate the DRA driver's kubelet gRPC bindings from the upstream ``.proto`` files.

Usage::

    python -m dra_driver.api.generate            # rewrite the committed files
    python -m dra_driver.api.generate --check    # exit 1 when they are stale

Inputs (verbatim upstream copies, kubelet module ``k8s.io/kubelet@v0.36.3``, the release the
local control plane is built from, ``scripts/k8s-versions.env``):

* ``upstream/dra-v1-api.proto`` — ``pkg/apis/dra/v1/api.proto`` (service ``DRAPlugin``:
  ``NodePrepareResources``, ``NodeUnprepareResources``; registered as ``v1.DRAPlugin``);
* ``upstream/dra-v1beta1-api.proto`` — ``pkg/apis/dra/v1beta1/api.proto`` (the same service,
  ``v1beta1.DRAPlugin``, which a 1.36 kubelet still speaks: ``servicesSupportedByKubelet`` in
  ``pkg/kubelet/cm/dra/plugin/dra_plugin.go``);
* ``upstream/pluginregistration-v1-api.proto`` — ``pkg/apis/pluginregistration/v1/api.proto``
  (service ``Registration``: ``GetInfo``, ``NotifyRegistrationStatus``, served by the plugin
  on its registration socket for the kubelet's plugin watcher).

* ``upstream/dra-health-v1alpha1-api.proto`` — ``pkg/apis/dra-health/v1alpha1/api.proto``
  (service ``DRAResourceHealth``: ``NodeWatchResources``, the devices' health streamed to the
  kubelet, which shows it in the pods' ``allocatedResourcesStatus``; gate
  ``ResourceHealthStatus``, beta and on by default in 1.36).

Outputs: ``dra_v1.proto``, ``dra_v1beta1.proto``, ``pluginregistration.proto``,
``dra_health.proto`` and their
``*_pb2.py``, ``*_pb2.pyi``, ``*_pb2_grpc.py`` (:mod:`gpunode.protogen`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpunode import protogen
from gpunode.protogen import ProtoSource

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]
UPSTREAM_MODULE = "k8s.io/kubelet@v0.36.3"

SOURCES = (
    ProtoSource("dra-v1-api.proto", "pkg/apis/dra/v1/api.proto", "dra_v1.proto"),
    ProtoSource("dra-v1beta1-api.proto", "pkg/apis/dra/v1beta1/api.proto", "dra_v1beta1.proto"),
    ProtoSource("pluginregistration-v1-api.proto", "pkg/apis/pluginregistration/v1/api.proto",
                "pluginregistration.proto"),
    ProtoSource("dra-health-v1alpha1-api.proto", "pkg/apis/dra-health/v1alpha1/api.proto",
                "dra_health.proto"),
)

PACKAGE = protogen.ProtoPackage(PACKAGE_DIR, Path("dra_driver") / "api", UPSTREAM_MODULE,
                                SOURCES)


def stale_files() -> list[str]:
    """:func:`gpunode.protogen.stale_files` for this package."""
    return protogen.stale_files(PACKAGE)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    return protogen.main(PACKAGE, REPO_ROOT, argv)


if __name__ == "__main__":
    sys.exit(main())
