"""This node's kubelet NUMA-alignment settings, which the plugin publishes on its Node.

The extender must know whether the kubelet's Topology Manager will narrow a container's
devices to one NUMA mask (``topologyManagerPolicy`` other than ``none``), how
(``topologyManagerScope``, the ``prefer-closest-numa-nodes`` option), and whether the static
CPU manager adds its hints (``cpuManagerPolicy``): see :mod:`topology.numa_alignment`. The
device plugin is the one component on the node, so it tells, in the labels of
:func:`topology.numa_alignment.kubelet_config_labels`.

Where the settings come from, highest first:

1. the plugin's own settings ``kubelet_topology_manager_policy``,
   ``kubelet_topology_manager_scope``, ``kubelet_cpu_manager_policy`` (flags
   ``--kubelet-topology-manager-policy`` …, ``GPUTOPO_DP_KUBELET_…``, the plugin's config
   file);
2. the kubelet's own configuration file (``kubelet_config_file``, usually
   ``/var/lib/kubelet/config.yaml`` mounted read-only): its ``KubeletConfiguration`` fields of
   the same names and ``topologyManagerPolicyOptions``;
3. the kubelet's defaults: ``none``, ``container``, ``none``.

A kubelet configured by command-line flags (deprecated, but they win over its file) is not
visible in the file: give the plugin the same values as settings then.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from topology.numa_alignment import (
    POLICY_NONE,
    SCOPE_CONTAINER,
    KubeletConfig,
    KubeletConfigError,
)
from topology.text import read_utf8

#: The ``topologyManagerPolicyOptions`` key gputopo reads.
PREFER_CLOSEST = "prefer-closest-numa-nodes"


class KubeletConfigFileError(RuntimeError):
    """The kubelet's configuration file cannot be read or is not a KubeletConfiguration; one
    line naming the file."""


def read_kubelet_config_file(path: Path) -> dict[str, Any]:
    """The NUMA-alignment fields of a ``KubeletConfiguration`` file (camelCase keys as the
    kubelet writes them; absent fields are left out).

    Raises:
        KubeletConfigFileError: unreadable, not YAML/JSON, not a mapping, or of another
            ``kind``.
    """
    try:
        text = read_utf8(path)
    except OSError as exc:
        raise KubeletConfigFileError(
            f"cannot read the kubelet config file {path}: {exc.strerror or exc}") from None
    try:
        raw = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise KubeletConfigFileError(f"kubelet config file {path} is not YAML: {first}") \
            from None
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise KubeletConfigFileError(f"kubelet config file {path} is not a mapping")
    kind = raw.get("kind")
    if kind is not None and kind != "KubeletConfiguration":
        raise KubeletConfigFileError(
            f"kubelet config file {path} holds a {kind}, not a KubeletConfiguration")
    keys = ("topologyManagerPolicy", "topologyManagerScope", "cpuManagerPolicy",
            "topologyManagerPolicyOptions")
    return {k: raw[k] for k in keys if raw.get(k) is not None}


def resolve_kubelet_config(
    *, file: Path | None = None, policy: str | None = None, scope: str | None = None,
    cpu_manager_policy: str | None = None,
) -> tuple[KubeletConfig, str]:
    """The node's kubelet NUMA-alignment settings and where they came from (for the
    start-up log line).

    Args:
        file: the kubelet's configuration file, or None.
        policy, scope, cpu_manager_policy: explicit values (win over the file).

    Raises:
        KubeletConfigFileError: ``file`` is unusable.
        KubeletConfigError: a value the 1.36 kubelet would not accept (named).
    """
    from_file = read_kubelet_config_file(file) if file is not None else {}
    options = from_file.get("topologyManagerPolicyOptions") or {}
    if not isinstance(options, Mapping):
        raise KubeletConfigError("topologyManagerPolicyOptions in the kubelet config file is "
                                 "not a mapping")
    closest_text = str(options.get(PREFER_CLOSEST, "false")).strip().lower()
    if closest_text not in ("true", "false"):
        raise KubeletConfigError(f"topologyManagerPolicyOptions {PREFER_CLOSEST}="
                                 f"{options.get(PREFER_CLOSEST)!r} is not true or false")

    def pick(explicit: str | None, key: str, default: str) -> tuple[str, str]:
        if explicit:
            return explicit.strip(), "setting"
        if key in from_file:
            return str(from_file[key]).strip(), f"{file}"
        return default, "kubelet default"

    p, p_from = pick(policy, "topologyManagerPolicy", POLICY_NONE)
    s, s_from = pick(scope, "topologyManagerScope", SCOPE_CONTAINER)
    c, c_from = pick(cpu_manager_policy, "cpuManagerPolicy", "none")
    config = KubeletConfig(p, s, c, prefer_closest_numa=closest_text == "true")
    sources = sorted({p_from, s_from, c_from})
    return config, ", ".join(sources)
