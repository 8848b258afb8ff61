#!/usr/bin/env bash
# Regenerate the kubelet gRPC bindings from the vendored upstream protos:
# device_plugin/api/*_pb2*.py (device plugin, pod resources) and dra_driver/api/*_pb2*.py
# (DRA v1/v1beta1, plugin registration).
# Usage: scripts/gen-proto.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m device_plugin.api.generate "$@"
exec .venv/bin/python -m dra_driver.api.generate "$@"
