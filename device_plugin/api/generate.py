"""Regenerate the device plugin's kubelet gRPC bindings from the upstream ``.proto`` files.

Usage::

    python -m device_plugin.api.generate            # rewrite the committed files
    python -m device_plugin.api.generate --check    # exit 1 when they are stale
    python -m device_plugin.api.generate --out DIR  # write the tree under DIR instead

Inputs (verbatim upstream copies, kubelet module ``k8s.io/kubelet@v0.33.0``):

* ``upstream/deviceplugin-v1beta1-api.proto`` — ``pkg/apis/deviceplugin/v1beta1/api.proto``
  (services ``Registration`` and ``DevicePlugin``);
* ``upstream/podresources-v1-api.proto`` — ``pkg/apis/podresources/v1/api.proto`` (service
  ``PodResourcesLister``; the plugin uses ``List`` to tell which pod the kubelet is admitting).

Outputs, in this package: ``api.proto`` and ``podresources.proto`` (the upstream text with the
gogoproto extensions removed, :func:`gpunode.protogen.strip_gogoproto`), and for each of them
``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` from ``grpcio-tools``
(:mod:`gpunode.protogen` says how).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpunode import protogen
from gpunode.protogen import ProtoSource, strip_gogoproto

__all__ = ["PACKAGE", "PACKAGE_DIR", "SOURCES", "generate", "main", "stale_files",
           "strip_gogoproto"]

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]

#: Upstream module the copies in ``upstream/`` were taken from.
UPSTREAM_MODULE = "k8s.io/kubelet@v0.33.0"

SOURCES = (
    ProtoSource(
        "deviceplugin-v1beta1-api.proto",
        "pkg/apis/deviceplugin/v1beta1/api.proto",
        "api.proto",
    ),
    ProtoSource(
        "podresources-v1-api.proto",
        "pkg/apis/podresources/v1/api.proto",
        "podresources.proto",
    ),
)

PACKAGE = protogen.ProtoPackage(PACKAGE_DIR, Path("device_plugin") / "api", UPSTREAM_MODULE,
                                SOURCES)


def generate(out_root: Path) -> list[Path]:
    """:func:`gpunode.protogen.generate` for this package."""
    return protogen.generate(PACKAGE, out_root)


def stale_files() -> list[str]:
    """:func:`gpunode.protogen.stale_files` for this package."""
    return protogen.stale_files(PACKAGE)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    return protogen.main(PACKAGE, REPO_ROOT, argv)


if __name__ == "__main__":
    sys.exit(main())
