"""What a container gets for its devices: environment, device nodes, mounts (pure).

For every resource:

* ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES``: the GPU UUIDs, in the order of the
  pod's assignment (UUIDs, not indices: indices are renumbered inside the container and by the
  MPS server; UUIDs are not);
* ``CUDA_DEVICE_ORDER=PCI_BUS_ID``;
* ``GPUTOPO_CPU_AFFINITY`` (Linux cpulist of the GPUs' NUMA-local CPUs, Gaia §III-A) and
  ``GPUTOPO_NUMA_NODES``, plus ``GPUTOPO_GPU_INDICES`` and ``GPUTOPO_POD`` for diagnostics;
* device nodes ``/dev/nvidia<minor>`` per GPU and ``/dev/nvidiactl``, ``/dev/nvidia-uvm``,
  ``/dev/nvidia-uvm-tools`` (read-write-mknod ``rwm``).

For a share of a GPU (``gputopo.io/vgpu-core`` / ``gputopo.io/vgpu-memory``), additionally the
CUDA MPS limits from the pod's grant — ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<core %>`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M`` (device ordinal 0: the container sees one GPU) —
``CUDA_MPS_PIPE_DIRECTORY`` and a mount of the MPS pipe directory. Both vGPU resources return
the same full set, so a pod asking for either or both gets identical, conflict-free values
(the kubelet merges the responses of all resources of a container).

For a co-location slot (``gputopo.io/gpu-shared``, Tabrizian co-location under MPS): the one
GPU of its assignment, ``CUDA_MPS_PIPE_DIRECTORY`` and a mount of the MPS pipe directory, the
MPS control daemon's shared memory mounted at ``/dev/shm`` (when configured: MPS clients and
server exchange work through it), and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M`` from the
memory the extender reserved for it (the pod's ``gputopo.io/vgpu-memory`` request, else its
profile's) — no ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: co-located jobs share all SMs, which
is what Tabrizian's measurements assume. The slot and the pod's ``gputopo.io/vgpu-memory``
units return the same set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from topology.contract import Assignment
from topology.model import Topology, format_cpu_list

CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


@dataclass(frozen=True)
class ContainerGrant:
    """What the kubelet should give a container (mirrors ``ContainerAllocateResponse``).

    Attributes:
        envs: environment variables.
        devices: ``(container path, host path, permissions)``.
        mounts: ``(container path, host path, read only)``.
    """

    envs: Mapping[str, str] = field(default_factory=dict)
    devices: tuple[tuple[str, str, str], ...] = ()
    mounts: tuple[tuple[str, str, bool], ...] = ()


def grant(
    topology: Topology,
    pod_key: str,
    assignment: Assignment,
    gpu_uuids: Sequence[str],
    *,
    minors: Mapping[int, int],
    mps_pipe_dir: Path,
    mps_shm_dir: Path | None = None,
    device_exists: Callable[[str], bool] | None = None,
) -> ContainerGrant:
    """The container's environment, devices and mounts for ``gpu_uuids`` of ``assignment``.

    Args:
        topology: this node.
        pod_key: ``namespace/name`` (for ``GPUTOPO_POD``).
        assignment: the pod's parsed assignment (fractional grants come from it).
        gpu_uuids: the GPUs this container receives (a subset of the assignment, in its order).
        minors: GPU index → ``/dev/nvidia<minor>``.
        mps_pipe_dir: host MPS pipe directory (fractional grants and co-location slots).
        mps_shm_dir: host directory the MPS control daemon uses as ``/dev/shm``, mounted at
            ``/dev/shm`` for co-location slots (None: not mounted).
        device_exists: when given, device nodes for which it returns False are left out. A
            node with a fake topology (a test cluster, e.g. kind) has no ``/dev/nvidia*``; a
            device spec naming a missing host path would make the container fail to start.

    Raises:
        KeyError: a UUID is not on ``topology`` (callers check first).
    """
    by_uuid = {g.uuid: g.index for g in topology.gpus}
    ordered = [u for u in assignment.gpu_uuids if u in set(gpu_uuids)]
    indices = [by_uuid[u] for u in ordered]
    visible = ",".join(ordered)
    envs: dict[str, str] = {
        "CUDA_VISIBLE_DEVICES": visible,
        "NVIDIA_VISIBLE_DEVICES": visible,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "GPUTOPO_CPU_AFFINITY": format_cpu_list(topology.cpu_affinity(indices)),
        "GPUTOPO_NUMA_NODES": ",".join(str(n) for n in topology.numa_nodes(indices)),
        "GPUTOPO_GPU_INDICES": ",".join(str(i) for i in indices),
        "GPUTOPO_POD": pod_key,
    }
    devices = [(f"/dev/nvidia{minors[i]}", f"/dev/nvidia{minors[i]}", "rwm") for i in indices]
    devices += [(d, d, "rwm") for d in CONTROL_DEVICES]
    if device_exists is not None:
        devices = [d for d in devices if device_exists(d[1])]
    mounts: list[tuple[str, str, bool]] = []
    if assignment.fractional:
        if assignment.core_percent > 0:
            envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(assignment.core_percent)
        if assignment.memory_mib > 0:
            envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={assignment.memory_mib}M"
        envs["CUDA_MPS_PIPE_DIRECTORY"] = str(mps_pipe_dir)
        mounts.append((str(mps_pipe_dir), str(mps_pipe_dir), False))
    if assignment.shared:
        if assignment.memory_mib > 0:
            envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={assignment.memory_mib}M"
        envs["CUDA_MPS_PIPE_DIRECTORY"] = str(mps_pipe_dir)
        mounts.append((str(mps_pipe_dir), str(mps_pipe_dir), False))
        if mps_shm_dir is not None:
            mounts.append(("/dev/shm", str(mps_shm_dir), False))
        if assignment.colocation is not None and assignment.colocation.profile.key:
            envs["GPUTOPO_PROFILE"] = assignment.colocation.profile.key
    return ContainerGrant(envs=envs, devices=tuple(devices), mounts=tuple(mounts))
