#!/usr/bin/env bash
# Regenerate device_plugin/api/*_pb2*.py from the upstream kubelet protos.
# Usage: scripts/gen-proto.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m device_plugin.api.generate "$@"
