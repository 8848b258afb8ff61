"""Kubeconfig files for tests of the programs' API clients."""

from __future__ import annotations

from pathlib import Path

#: A well-formed kubeconfig whose API server refuses every connection (port 1 on loopback).
UNREACHABLE = """apiVersion: v1
kind: Config
current-context: c
clusters: [{name: k, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
"""


def unreachable_kubeconfig(directory: Path) -> Path:
    """Write :data:`UNREACHABLE` to ``directory/kubeconfig``; returns its path."""
    path = directory / "kubeconfig"
    path.write_text(UNREACHABLE)
    return path
