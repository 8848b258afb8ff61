"""What a container gets for its GPUs: environment, device nodes, mounts — the same for the
device plugin's ``Allocate`` and the DRA driver's CDI specs (pure, except
:func:`minor_numbers`, which reads ``/proc``).

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

The DRA driver gives a claim's containers the same through a CDI spec
(``dra_driver/cdi.py``): ``GPUTOPO_CLAIM`` in place of ``GPUTOPO_POD``; a share claim the
share's limits, a slot claim the slot's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from topology.contract import Assignment
from topology.model import Topology, format_cpu_list
from topology.text import decimal_int

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


@dataclass(frozen=True)
class MPSLimits:
    """The CUDA MPS side of a container that shares its one GPU.

    Attributes:
        shared: a co-location slot (Tabrizian: co-located jobs share all SMs, so no thread
            limit) rather than a vGPU share.
        core_percent: a vGPU share's compute, percent of the GPU (0: no thread limit).
        memory_mib: the memory limit, MiB (0: none).
        profile_key: a co-located job's profile key (``GPUTOPO_PROFILE``), "" for none.
    """

    shared: bool = False
    core_percent: int = 0
    memory_mib: int = 0
    profile_key: str = ""


def container_grant(
    topology: Topology,
    uuids: Sequence[str],
    *,
    minors: Mapping[int, int],
    mps: MPSLimits | None = None,
    mps_pipe_dir: Path,
    mps_shm_dir: Path | None = None,
    device_exists: Callable[[str], bool] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> ContainerGrant:
    """The environment, devices and mounts for a container holding ``uuids`` (in the order
    they are listed to it), see the module docstring.

    Args:
        topology: this node.
        uuids: the container's GPUs, in the order ``CUDA_VISIBLE_DEVICES`` lists them.
        minors: GPU index → ``/dev/nvidia<minor>``.
        mps: for a share of one GPU or a co-location slot, its MPS limits; None for whole GPUs.
        mps_pipe_dir: host MPS pipe directory (shares and slots).
        mps_shm_dir: host directory the MPS control daemon uses as ``/dev/shm``, mounted at
            ``/dev/shm`` for co-location slots (None: not mounted).
        device_exists: when given, device nodes for which it returns False are left out (a
            node with a fake topology has no ``/dev/nvidia*``; a device spec naming a missing
            host path would stop the container from starting).
        extra_env: more variables (who the GPUs are for: ``GPUTOPO_POD``, ``GPUTOPO_CLAIM``).

    Raises:
        KeyError: a UUID is not on ``topology`` (callers check first).
    """
    by_uuid = {g.uuid: g.index for g in topology.gpus}
    indices = [by_uuid[u] for u in uuids]
    visible = ",".join(uuids)
    envs: dict[str, str] = {
        "CUDA_VISIBLE_DEVICES": visible,
        "NVIDIA_VISIBLE_DEVICES": visible,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "GPUTOPO_CPU_AFFINITY": format_cpu_list(topology.cpu_affinity(indices)),
        "GPUTOPO_NUMA_NODES": ",".join(str(n) for n in topology.numa_nodes(indices)),
        "GPUTOPO_GPU_INDICES": ",".join(str(i) for i in indices),
        **(extra_env or {}),
    }
    devices = [(f"/dev/nvidia{minors[i]}", f"/dev/nvidia{minors[i]}", "rwm") for i in indices]
    devices += [(d, d, "rwm") for d in CONTROL_DEVICES]
    if device_exists is not None:
        devices = [d for d in devices if device_exists(d[1])]
    mounts: list[tuple[str, str, bool]] = []
    if mps is not None:
        if mps.core_percent > 0 and not mps.shared:
            envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(mps.core_percent)
        if mps.memory_mib > 0:
            envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={mps.memory_mib}M"
        envs["CUDA_MPS_PIPE_DIRECTORY"] = str(mps_pipe_dir)
        mounts.append((str(mps_pipe_dir), str(mps_pipe_dir), False))
        if mps.shared:
            if mps_shm_dir is not None:
                mounts.append(("/dev/shm", str(mps_shm_dir), False))
            if mps.profile_key:
                envs["GPUTOPO_PROFILE"] = mps.profile_key
    return ContainerGrant(envs=envs, devices=tuple(devices), mounts=tuple(mounts))


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
    """The device plugin's grant: :func:`container_grant` for ``gpu_uuids`` of a pod's
    ``assignment`` (in the assignment's order), with ``GPUTOPO_POD``.

    Args:
        topology: this node.
        pod_key: ``namespace/name`` (for ``GPUTOPO_POD``).
        assignment: the pod's parsed assignment (fractional grants come from it).
        gpu_uuids: the GPUs this container receives (a subset of the assignment).
        minors, mps_pipe_dir, mps_shm_dir, device_exists: as for :func:`container_grant`.

    Raises:
        KeyError: a UUID is not on ``topology`` (callers check first).
    """
    ordered = [u for u in assignment.gpu_uuids if u in set(gpu_uuids)]
    mps: MPSLimits | None = None
    if assignment.shared:
        key = assignment.colocation.profile.key if assignment.colocation is not None else ""
        mps = MPSLimits(shared=True, memory_mib=assignment.memory_mib, profile_key=key or "")
    elif assignment.fractional:
        mps = MPSLimits(core_percent=assignment.core_percent, memory_mib=assignment.memory_mib)
    return container_grant(topology, ordered, minors=minors, mps=mps, mps_pipe_dir=mps_pipe_dir,
                           mps_shm_dir=mps_shm_dir, device_exists=device_exists,
                           extra_env={"GPUTOPO_POD": pod_key})


def minor_numbers(topology: Topology, proc: Path | None) -> dict[int, int]:
    """GPU index → minor number of its ``/dev/nvidia<minor>`` node.

    With ``proc`` (the real host, normally ``/proc``), read ``Device Minor:`` from
    ``<proc>/driver/nvidia/gpus/<bus id>/information``; a GPU whose file is missing or
    unreadable, and every GPU when ``proc`` is None (the fake NVML), gets its index (NVML
    index and minor number agree on most machines, but not all: hence the lookup).
    """
    out = {g.index: g.index for g in topology.gpus}
    if proc is None:
        return out
    for g in topology.gpus:
        path = proc / "driver" / "nvidia" / "gpus" / g.pci_bus_id.lower() / "information"
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() != "Device Minor":
                continue
            minor = decimal_int(value)
            if minor is not None:
                out[g.index] = minor
                break
    return out
