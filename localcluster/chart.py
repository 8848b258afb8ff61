"""Render the gputopo Helm chart (``helm/gputopo``) with the pinned helm binary.

The end-to-end tests start kube-scheduler with exactly the KubeSchedulerConfiguration the chart
renders::

    from localcluster.chart import render_scheduler_config

    config = render_scheduler_config("http://127.0.0.1:8888")
    cp.start_scheduler(config, name="gputopo-scheduler")

and ``deploy/gputopo.yaml`` is this module's :func:`render_deploy_manifest` (regenerate with
``scripts/render-deploy.sh``; a test fails when it drifts).

helm is looked up in this order: ``$GPUTOPO_HELM``; ``helm`` in ``$GPUTOPO_K8S_BINDIR``; ``helm`` in
the toolset directory of ``scripts/build-k8s-tools.sh --print-bindir``; ``helm`` on ``PATH``;
finally :func:`localcluster.binaries.find_binaries` (which may build the toolset).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from localcluster.binaries import (
    ENV_BINDIR,
    BinariesUnavailable,
    default_bindir,
    find_binaries,
    repo_root,
)

CHART_DIR = repo_root() / "helm" / "gputopo"
"""The chart's directory."""

DEPLOY_MANIFEST = repo_root() / "deploy" / "gputopo.yaml"
"""The plain manifests: ``helm template`` with default values, plus a header."""

DEFAULT_RELEASE = "gputopo"
DEFAULT_NAMESPACE = "gputopo-system"


def pinned_kube_version() -> str:
    """``K8S_VERSION`` of ``scripts/k8s-versions.env`` (the local control plane's version):
    what ``helm template`` renders for, since the chart requires Kubernetes >= 1.36 and helm
    alone assumes an old version."""
    import re

    for line in (repo_root() / "scripts" / "k8s-versions.env").read_text().splitlines():
        m = re.match(r"^K8S_VERSION=(\S+)", line)
        if m:
            return m.group(1)
    raise RuntimeError("K8S_VERSION not found in scripts/k8s-versions.env")


KUBE_VERSION = pinned_kube_version()

ENV_HELM = "GPUTOPO_HELM"

DEPLOY_HEADER = f"""\
# gputopo: plain Kubernetes manifests (extender, gputopo-scheduler, device plugin, planner,
# RBAC). Needs Kubernetes 1.36 or later.
#
# GENERATED - do not edit. This file is exactly
#   helm template {DEFAULT_RELEASE} helm/gputopo --namespace {DEFAULT_NAMESPACE} \\
#     --kube-version {KUBE_VERSION}
# with the chart's default values, below this header. Regenerate with scripts/render-deploy.sh
# (tests/deploy/test_deploy_chart.py fails when it drifts from the chart).
#
# Install:
#   kubectl create namespace {DEFAULT_NAMESPACE}
#   kubectl apply -f deploy/gputopo.yaml
# Other settings (TLS, a fake topology, the policy, ...): use the chart, see helm/gputopo/README.md.
"""


class ChartError(RuntimeError):
    """helm failed (bad values, a template error) or its output is not what was expected.

    The message carries helm's stderr.
    """


def find_helm() -> Path:
    """The helm executable to use (see the module docstring for the lookup order).

    Raises:
        BinariesUnavailable: no helm found and the toolset cannot be built.
    """
    env = os.environ.get(ENV_HELM)
    if env:
        path = Path(env)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise BinariesUnavailable(f"{ENV_HELM}={env} is not an executable file")
    candidates: list[Path] = []
    if os.environ.get(ENV_BINDIR):
        candidates.append(Path(os.environ[ENV_BINDIR]) / "helm")
    try:
        candidates.append(default_bindir() / "helm")
    except BinariesUnavailable:
        pass
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path.resolve()
    on_path = shutil.which("helm")
    if on_path:
        return Path(on_path)
    helm = find_binaries().helm
    if helm is None:
        raise BinariesUnavailable("the toolset was built but holds no helm binary")
    return helm


def _set_string_arg(key: str, value: str) -> str:
    """``key=value`` for ``--set-string``, with helm's separators in ``value`` escaped."""
    escaped = value.replace("\\", "\\\\").replace(",", "\\,")
    return f"{key}={escaped}"


def helm_template(
    values: Mapping[str, Any] | None = None,
    *,
    set_string: Mapping[str, str] | None = None,
    release: str = DEFAULT_RELEASE,
    namespace: str = DEFAULT_NAMESPACE,
    chart: Path = CHART_DIR,
    helm: Path | None = None,
    extra_args: Sequence[str] = (),
    timeout_s: float = 120.0,
) -> str:
    """``helm template <release> <chart> --namespace <namespace> --kube-version
    <KUBE_VERSION>`` and return its stdout.

    Args:
        values: chart values (nested mapping, as in ``values.yaml``), passed as a values file.
        set_string: dotted keys to values, passed with ``--set-string`` (they win over
            ``values``).
        release: release name (object names derive from it).
        namespace: release namespace.
        chart: chart directory.
        helm: helm executable; default :func:`find_helm`.
        extra_args: more helm arguments (e.g. ``["--show-only", "templates/scheduler.yaml"]``).
        timeout_s: give up after this many seconds.

    Raises:
        ChartError: helm exited non-zero (schema violation, ``fail`` in a template, ...).
        BinariesUnavailable: no helm.
    """
    exe = helm or find_helm()
    with tempfile.TemporaryDirectory(prefix="gputopo-helm-") as tmp:
        args: list[str] = [str(exe), "template", release, str(chart), "--namespace", namespace,
                           "--kube-version", KUBE_VERSION]
        if values:
            values_file = Path(tmp) / "values.yaml"
            values_file.write_text(yaml.safe_dump(dict(values), sort_keys=False))
            args += ["--values", str(values_file)]
        for key, value in (set_string or {}).items():
            args += ["--set-string", _set_string_arg(key, value)]
        args += list(extra_args)
        env = {**os.environ, "HELM_CACHE_HOME": f"{tmp}/cache",
               "HELM_CONFIG_HOME": f"{tmp}/config", "HELM_DATA_HOME": f"{tmp}/data"}
        try:
            proc = subprocess.run(
                args, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise ChartError(f"helm template failed to run: {exc}") from exc
    if proc.returncode != 0:
        raise ChartError(
            f"helm template exited {proc.returncode}: {' '.join(proc.stderr.split())}"
        )
    return proc.stdout


def parse_manifests(text: str) -> list[dict[str, Any]]:
    """The objects of a multi-document YAML stream (empty documents dropped).

    Raises:
        ChartError: a document is not valid YAML or not a Kubernetes object.
    """
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ChartError(f"rendered manifests are not valid YAML: {exc}") from exc
    objects: list[dict[str, Any]] = []
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            raise ChartError(f"rendered document is not a Kubernetes object: {doc!r:.200}")
        objects.append(doc)
    return objects


def render_manifests(
    values: Mapping[str, Any] | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    """:func:`helm_template` parsed into a list of objects (same arguments).

    Raises:
        ChartError, BinariesUnavailable: as :func:`helm_template`.
    """
    return parse_manifests(helm_template(values, **kwargs))


def scheduler_config_from_manifests(objects: Sequence[Mapping[str, Any]]) -> str:
    """The ``config.yaml`` of the chart's scheduler ConfigMap among rendered ``objects``.

    Raises:
        ChartError: there is no ConfigMap holding a KubeSchedulerConfiguration.
    """
    for obj in objects:
        if obj.get("kind") != "ConfigMap":
            continue
        text = (obj.get("data") or {}).get("config.yaml")
        if isinstance(text, str) and "kind: KubeSchedulerConfiguration" in text:
            return text
    raise ChartError("no ConfigMap with a KubeSchedulerConfiguration in the rendered chart")


def render_scheduler_config(
    extender_url: str,
    *,
    release: str = DEFAULT_RELEASE,
    namespace: str = DEFAULT_NAMESPACE,
    helm: Path | None = None,
    **values: Any,
) -> str:
    """The KubeSchedulerConfiguration YAML the chart renders, calling the extender at
    ``extender_url``.

    Runs ``helm template`` with ``--set-string extender.urlOverride=<extender_url>`` and returns
    the ``config.yaml`` of the ``<release>-scheduler`` ConfigMap, unchanged. It has one profile
    (``schedulerName: gputopo-scheduler``) and one extender entry (filter/prioritize/bind verbs,
    weight, ``nodeCacheCapable``, ``managedResources``, ``httpTimeout``; ``enableHTTPS`` and
    ``tlsConfig.caData`` when ``extender={"tls": {...}}`` enables TLS). It sets no
    ``clientConnection.kubeconfig``: :meth:`localcluster.ControlPlane.start_scheduler` fills in
    the admin kubeconfig.

    Leader election is ON by default, with the Lease ``gputopo-scheduler`` in ``namespace``:
    create that namespace first, or pass ``scheduler={"leaderElection": {"enabled": False}}``.

    Args:
        extender_url: the extender's base URL, e.g. ``http://127.0.0.1:8888`` (https:// when
            TLS is enabled in ``values``).
        release: release name.
        namespace: release namespace (where the Lease lives).
        helm: helm executable; default :func:`find_helm`.
        **values: top-level chart values, nested as in ``values.yaml``, e.g.
            ``scheduler={"extender": {"weight": 10, "httpTimeout": "30s"}}``.

    Raises:
        ChartError: helm rejected the values (the message says which), or no scheduler config
            was rendered (``scheduler.enabled`` false).
        BinariesUnavailable: no helm.
    """
    objects = render_manifests(
        values,
        set_string={"extender.urlOverride": extender_url},
        release=release,
        namespace=namespace,
        helm=helm,
    )
    return scheduler_config_from_manifests(objects)


def render_deploy_manifest(helm: Path | None = None) -> str:
    """The content ``deploy/gputopo.yaml`` must have: :data:`DEPLOY_HEADER` followed by
    ``helm template gputopo helm/gputopo --namespace gputopo-system`` (default values).

    Raises:
        ChartError, BinariesUnavailable: as :func:`helm_template`.
    """
    return DEPLOY_HEADER + helm_template(helm=helm)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m localcluster.chart deploy [--check]``: write (or check) deploy/gputopo.yaml."""
    parser = argparse.ArgumentParser(prog="python -m localcluster.chart")
    sub = parser.add_subparsers(dest="command", required=True)
    deploy = sub.add_parser("deploy", help=f"regenerate {DEPLOY_MANIFEST.relative_to(repo_root())}")
    deploy.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    sched = sub.add_parser("scheduler-config", help="print the rendered KubeSchedulerConfiguration")
    sched.add_argument("extender_url")
    args = parser.parse_args(argv)
    try:
        if args.command == "scheduler-config":
            sys.stdout.write(render_scheduler_config(args.extender_url))
            return 0
        text = render_deploy_manifest()
    except (ChartError, BinariesUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rel = DEPLOY_MANIFEST.relative_to(repo_root())
    if args.check:
        current = DEPLOY_MANIFEST.read_text() if DEPLOY_MANIFEST.is_file() else ""
        if current != text:
            print(f"{rel} is out of date: run scripts/render-deploy.sh", file=sys.stderr)
            return 1
        print(f"{rel} is up to date")
        return 0
    DEPLOY_MANIFEST.parent.mkdir(parents=True, exist_ok=True)
    DEPLOY_MANIFEST.write_text(text)
    print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
