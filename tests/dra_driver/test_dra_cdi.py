"""CDI specs (dra_driver/cdi.py): the shape specs-go defines, the CDI name rules, and the same
container environment as the device plugin's Allocate (one truth, gpunode.container)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from dra_driver import cdi
from gpunode.container import grant
from topology import catalog
from topology.contract import Assignment
from topology.dra import ClaimAllocation, DeviceKind, GpuGrant

TOPO = catalog.get("dgx1-v100")
MINORS = {g.index: 10 + g.index for g in TOPO.gpus}
UID = str(uuid.UUID(int=7))


def _alloc(kind: DeviceKind, *gpus: int, core: int = 0, mem: int = 0) -> ClaimAllocation:
    return ClaimAllocation("n", tuple(GpuGrant(g, kind, "r", core, mem) for g in gpus))


def _spec(alloc: ClaimAllocation, **kw: object) -> cdi.Spec:
    return cdi.claim_spec(TOPO, UID, "ns/c", alloc, minors=MINORS,
                          mps_pipe_dir=Path("/run/nvidia/mps"), **kw)  # type: ignore[arg-type]


def test_whole_gpus() -> None:
    spec = _spec(_alloc(DeviceKind.GPU, 3, 1))
    doc = cdi.spec_json(spec)
    assert doc["cdiVersion"] == "0.5.0" and doc["kind"] == "gputopo.io/gpu"
    assert [d["name"] for d in doc["devices"]] == [f"{UID}-gpu-3", f"{UID}-gpu-1"]
    assert doc["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia13", "hostPath": "/dev/nvidia13", "permissions": "rwm"}]
    assert [n["path"] for n in doc["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    env = dict(e.split("=", 1) for e in doc["containerEdits"]["env"])
    assert env["CUDA_VISIBLE_DEVICES"] == f"{TOPO.gpus[3].uuid},{TOPO.gpus[1].uuid}"
    assert env["GPUTOPO_GPU_INDICES"] == "3,1"
    assert cdi.cdi_device_id(UID, "gpu-3") == f"gputopo.io/gpu={UID}-gpu-3"


def test_the_environment_is_the_device_plugins() -> None:
    """The same GPUs through Allocate and through a claim: identical variables but the
    owner's name (GPUTOPO_POD vs GPUTOPO_CLAIM), identical devices and mounts."""
    for kind, core, mem in ((DeviceKind.GPU, 0, 0), (DeviceKind.SHARE, 25, 3000)):
        gpus = (4, 5) if kind is DeviceKind.GPU else (4,)
        spec = _spec(_alloc(kind, *gpus, core=core, mem=mem))
        a = Assignment("n", gpus, tuple(TOPO.gpus[i].uuid for i in gpus), "", (), 0.0, core,
                       mem)
        g = grant(TOPO, "ns/p", a, a.gpu_uuids, minors=MINORS,
                  mps_pipe_dir=Path("/run/nvidia/mps"))
        env = dict(e.split("=", 1) for e in spec.containerEdits.env)
        assert env.pop("GPUTOPO_CLAIM") == "ns/c"
        dp = dict(g.envs)
        assert dp.pop("GPUTOPO_POD") == "ns/p"
        assert env == dp
        nodes = {n.hostPath for d in spec.devices for n in d.containerEdits.deviceNodes}
        nodes |= {n.hostPath for n in spec.containerEdits.deviceNodes}
        assert nodes == {h for _c, h, _p in g.devices}
        assert [(m.containerPath, m.hostPath) for m in spec.containerEdits.mounts] == [
            (c, h) for c, h, _ro in g.mounts]


def test_missing_device_nodes_are_left_out_but_devices_stay_valid() -> None:
    spec = _spec(_alloc(DeviceKind.GPU, 0), device_exists=lambda p: p == "/dev/nvidiactl")
    assert [n.path for n in spec.containerEdits.deviceNodes] == ["/dev/nvidiactl"]
    (dev,) = spec.devices
    assert dev.containerEdits.deviceNodes == []
    assert dev.containerEdits.env == [f"GPUTOPO_GPU_0_UUID={TOPO.gpus[0].uuid}"]


def test_names_follow_the_cdi_rules() -> None:
    """pkg/parser: vendor/class start with a letter, end alphanumeric; device names of
    [A-Za-z0-9_.:-], alphanumeric at both ends; env entries NAME=value."""
    spec = _spec(_alloc(DeviceKind.SLOT, 7, mem=100))
    vendor, klass = spec.kind.split("/")
    for part in (vendor, klass):
        assert re.fullmatch(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?", part)
    for d in spec.devices:
        assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?", d.name)
        assert d.containerEdits.env or d.containerEdits.deviceNodes
    for e in spec.containerEdits.env:
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", e)
    with pytest.raises(ValueError):
        cdi.Device(name="-bad", containerEdits=cdi.ContainerEdits(env=["A=1"]))
    with pytest.raises(ValueError):
        cdi.Spec(kind="gputopo.io", devices=[])


def test_write_read_remove(tmp_path: Path) -> None:
    spec = _spec(_alloc(DeviceKind.GPU, 2))
    path = cdi.spec_path(tmp_path, UID)
    assert path.name == f"gputopo.io-gpu_{UID}.json"
    cdi.write_spec(path, spec)
    assert cdi.read_spec(path) == spec
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert json.loads(path.read_text())["devices"][0]["name"] == f"{UID}-gpu-2"
    cdi.remove_spec(path)
    cdi.remove_spec(path)  # gone already: fine
    with pytest.raises(cdi.CDIError, match="writing CDI spec"):
        cdi.write_spec(tmp_path / "missing" / "x.json", spec)
