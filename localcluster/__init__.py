"""A throwaway Kubernetes control plane on loopback, for end-to-end tests.

``etcd`` + ``kube-apiserver`` (+ optionally ``kube-scheduler`` and ``kwok`` fake nodes), each a
child process in its own process group, all bound to 127.0.0.1 on free ports, all state in a
temporary directory. Typical use::

    from localcluster import ControlPlane, find_binaries

    with ControlPlane(find_binaries()) as cp:
        cp.start_kwok()
        cp.start_scheduler()          # default KubeSchedulerConfiguration
        cp.create_default_serviceaccount("default")
        cp.add_kwok_node("node-0", capacity={"cpu": "32", "nvidia.com/gpu": "8"})
        core = cp.core_v1()
        ...

The binaries are built by ``scripts/build-k8s-tools.sh`` (see :mod:`localcluster.binaries`).
"""

from localcluster.binaries import (
    Binaries,
    BinariesUnavailable,
    build_script_path,
    default_bindir,
    find_binaries,
)
from localcluster.controlplane import (
    DEFAULT_SCHEDULER_CONFIG,
    KWOK_NODE_ANNOTATION,
    ControlPlane,
    ControlPlaneError,
)
from localcluster.process import ManagedProcess

__all__ = [
    "DEFAULT_SCHEDULER_CONFIG",
    "KWOK_NODE_ANNOTATION",
    "Binaries",
    "BinariesUnavailable",
    "ControlPlane",
    "ControlPlaneError",
    "ManagedProcess",
    "build_script_path",
    "default_bindir",
    "find_binaries",
]
