"""CDI specs: how a prepared claim's GPUs reach its containers.

The kubelet hands the container runtime the CDI device IDs ``NodePrepareResources`` returned;
the runtime (containerd, CRI-O) looks them up in the spec files under ``/var/run/cdi`` and
applies their container edits (Container Device Interface, ``tags.cncf.io/
container-device-interface``: ``specs-go/config.go`` for the shape, ``pkg/parser`` for the
name rules, ``pkg/cdi/spec-dirs.go`` for the directory).

One spec file per claim, ``<cdi dir>/gputopo.io-gpu_<claim uid>.json``, kind
:data:`CDI_KIND`:

* one CDI device per allocated GPU, named ``<claim uid>-gpu-<i>`` (``-share``/``-slot`` for
  those views), whose edits are its device node ``/dev/nvidia<minor>`` and
  ``GPUTOPO_GPU_<i>_UUID`` (a device's edits may not be empty);
* spec-wide edits (applied once whenever any device of the spec is injected): the claim's
  environment — ``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES`` with **exactly the
  claim's GPU UUIDs, in the allocation's order**, ``CUDA_DEVICE_ORDER``, the CPU-affinity
  variables and, for a share or slot, the MPS limits, exactly what the device plugin's
  ``Allocate`` gives (:func:`gpunode.container.container_grant`) with ``GPUTOPO_CLAIM``
  instead of ``GPUTOPO_POD`` — plus the control device nodes and the MPS mounts.

A container that references two gputopo claims gets both specs; their ``CUDA_VISIBLE_DEVICES``
would collide (the runtime keeps one), so a container should get its GPUs through one claim
(one request of ``count: k``), which is also what the placement policies decide jointly.

``cdiVersion`` is ``0.5.0``: the oldest version with ``deviceNodes[].hostPath`` (what these
specs use), so every runtime with CDI support reads them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpunode.container import CONTROL_DEVICES, MPSLimits, container_grant
from topology.dra import ClaimAllocation, DeviceKind
from topology.model import Topology

#: CDI version of the specs written here.
CDI_VERSION = "0.5.0"
#: ``<vendor>/<class>`` of the specs.
CDI_VENDOR = "gputopo.io"
CDI_CLASS = "gpu"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
#: Where runtimes look for generated (transient) specs.
DEFAULT_CDI_DIR = "/var/run/cdi"

_VENDOR_OR_CLASS = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


class CDIError(RuntimeError):
    """A spec could not be written or removed; one line."""


class DeviceNode(BaseModel):
    """``specs-go`` ``DeviceNode`` (the fields gputopo sets)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    hostPath: str = ""
    permissions: str = ""


class Mount(BaseModel):
    """``specs-go`` ``Mount``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hostPath: str
    containerPath: str
    options: list[str] = Field(default_factory=list)


class ContainerEdits(BaseModel):
    """``specs-go`` ``ContainerEdits`` (env as ``NAME=value``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: list[str] = Field(default_factory=list)
    deviceNodes: list[DeviceNode] = Field(default_factory=list)
    mounts: list[Mount] = Field(default_factory=list)


class Device(BaseModel):
    """``specs-go`` ``Device``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    containerEdits: ContainerEdits

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _DEVICE.match(v):
            raise ValueError(f"{v!r} is not a CDI device name (pkg/parser.ValidateDeviceName)")
        return v


class Spec(BaseModel):
    """``specs-go`` ``Spec``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cdiVersion: str = CDI_VERSION
    kind: str = CDI_KIND
    devices: list[Device]
    containerEdits: ContainerEdits = Field(default_factory=ContainerEdits)

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        vendor, _, klass = v.partition("/")
        if not (_VENDOR_OR_CLASS.match(vendor) and _VENDOR_OR_CLASS.match(klass)):
            raise ValueError(f"{v!r} is not a CDI kind vendor/class (pkg/parser)")
        return v


def cdi_device_name(claim_uid: str, device: str) -> str:
    """The CDI device of one allocated device of a claim: ``<claim uid>-<device>``."""
    return f"{claim_uid}-{device}"


def cdi_device_id(claim_uid: str, device: str) -> str:
    """The fully qualified CDI device ID the kubelet passes to the runtime
    (``gputopo.io/gpu=<claim uid>-<device>``)."""
    return f"{CDI_KIND}={cdi_device_name(claim_uid, device)}"


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    """The claim's spec file (``<vendor>-<class>_<uid>.json``, the CDI library's transient
    spec name)."""
    return cdi_dir / f"{CDI_VENDOR}-{CDI_CLASS}_{claim_uid}.json"


def claim_spec(
    topology: Topology,
    claim_uid: str,
    claim_key: str,
    alloc: ClaimAllocation,
    *,
    minors: Mapping[int, int],
    mps_pipe_dir: Path,
    mps_shm_dir: Path | None = None,
    device_exists: Callable[[str], bool] | None = None,
) -> Spec:
    """The CDI spec giving ``alloc``'s GPUs to the containers of claim ``claim_uid``.

    Args:
        topology: this node.
        claim_uid: the claim's UID (names the devices and the file).
        claim_key: ``namespace/name`` (``GPUTOPO_CLAIM``).
        alloc: the claim's devices of this driver, in allocation order.
        minors: GPU index → ``/dev/nvidia<minor>``.
        mps_pipe_dir, mps_shm_dir: host MPS directories (shares and slots).
        device_exists: leave out device nodes missing on the host (fake-topology nodes).
    """
    uuids = [topology.gpus[i].uuid for i in alloc.gpus]
    mps: MPSLimits | None = None
    if alloc.kind is DeviceKind.SHARE:
        mps = MPSLimits(core_percent=alloc.core_percent, memory_mib=alloc.memory_mib)
    elif alloc.kind is DeviceKind.SLOT:
        mps = MPSLimits(shared=True, memory_mib=alloc.memory_mib)
    grant = container_grant(topology, uuids, minors=minors, mps=mps, mps_pipe_dir=mps_pipe_dir,
                            mps_shm_dir=mps_shm_dir, device_exists=device_exists,
                            extra_env={"GPUTOPO_CLAIM": claim_key})
    per_gpu = {f"/dev/nvidia{minors[i]}" for i in alloc.gpus}
    devices = []
    for g in alloc.grants:
        node = f"/dev/nvidia{minors[g.index]}"
        nodes = [DeviceNode(path=c, hostPath=h, permissions=p)
                 for c, h, p in grant.devices if h == node]
        # a device's edits may not be empty (pkg/cdi/device.go): its UUID is always there
        env = [f"GPUTOPO_GPU_{g.index}_UUID={topology.gpus[g.index].uuid}"]
        devices.append(Device(name=cdi_device_name(claim_uid, g.device),
                              containerEdits=ContainerEdits(env=env, deviceNodes=nodes)))
    common = ContainerEdits(
        env=[f"{k}={v}" for k, v in grant.envs.items()],
        deviceNodes=[DeviceNode(path=c, hostPath=h, permissions=p)
                     for c, h, p in grant.devices if h not in per_gpu and h in CONTROL_DEVICES],
        mounts=[Mount(hostPath=h, containerPath=c,
                      options=["ro", "nosuid", "nodev", "bind"] if ro
                      else ["rw", "nosuid", "nodev", "bind"])
                for c, h, ro in grant.mounts],
    )
    return Spec(devices=devices, containerEdits=common)


def spec_json(spec: Spec) -> dict[str, Any]:
    """The spec as written to its file (empty lists left out)."""
    return spec.model_dump(mode="json", exclude_defaults=False, exclude_none=True)


def write_spec(path: Path, spec: Spec) -> None:
    """Write ``spec`` to ``path`` atomically (temp file, fsync, rename), mode 0644.

    Raises:
        CDIError: the directory is missing or not writable.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(spec_json(spec), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise CDIError(f"writing CDI spec {path}: {exc.strerror or exc}") from None


def remove_spec(path: Path) -> None:
    """Remove a claim's spec (gone already is fine).

    Raises:
        CDIError: it exists but cannot be removed.
    """
    try:
        path.unlink()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CDIError(f"removing CDI spec {path}: {exc.strerror or exc}") from None


def read_spec(path: Path) -> Spec:
    """Read a spec back (tests, and the driver's check that a prepared claim's file is
    intact).

    Raises:
        CDIError: missing, not JSON, or not a CDI spec of this shape.
    """
    try:
        return Spec.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CDIError(f"reading CDI spec {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CDIError(f"CDI spec {path} is not valid: {' '.join(str(exc).split())}") from None
