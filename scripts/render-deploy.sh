#!/usr/bin/env bash
# Regenerate deploy/gputopo.yaml from the Helm chart (default values):
#   helm template gputopo helm/gputopo --namespace gputopo-system, plus a header.
# helm is the pinned one from scripts/build-k8s-tools.sh (built on first use).
# Usage: scripts/render-deploy.sh [--check]   (--check: exit 1 when the file is out of date)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || ./scripts/setup.sh
exec "$PY" -m localcluster.chart deploy "$@"
