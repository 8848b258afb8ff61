"""Resources and device IDs for every catalog machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from device_plugin.devices import (
    BY_NAME,
    MAX_DEVICE_ID,
    RESOURCES,
    DeviceIDError,
    build_devices,
    gpu_of,
    gpus_of,
    memory_units,
)
from gpunode.container import minor_numbers
from topology import catalog
from topology.contract import RESOURCE_GPU, RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY
from topology.model import Topology


@pytest.mark.parametrize("name", catalog.names())
def test_device_lists_of_every_catalog_machine(name: str) -> None:
    topo = catalog.get(name)
    for spec in RESOURCES:
        devices = build_devices(topo, spec, 256)
        ids = [d.id for d in devices]
        assert len(set(ids)) == len(ids)
        assert all(len(i) <= MAX_DEVICE_ID for i in ids)
        for d in devices:
            g = topo.gpus[d.gpu]
            assert d.uuid == g.uuid and d.numa_node == g.numa_node
            assert gpu_of(spec, d.id) == g.uuid
        per_gpu = {g.uuid: sum(1 for d in devices if d.uuid == g.uuid) for g in topo.gpus}
        for g in topo.gpus:
            expected = {"gpu": 1, "core": 100, "memory": g.memory_mib // 256,
                        "shared": 3}[spec.kind]
            assert per_gpu[g.uuid] == expected


def test_device_id_shapes(topo: Topology) -> None:
    u = topo.gpus[3].uuid
    gpu, core, mem = (
        BY_NAME[RESOURCE_GPU],
        BY_NAME[RESOURCE_VGPU_CORE],
        BY_NAME[RESOURCE_VGPU_MEMORY],
    )
    assert [d.id for d in build_devices(topo, gpu, 256)][3] == u
    assert f"{u}::core-99" in {d.id for d in build_devices(topo, core, 256)}
    assert f"{u}::mem-62" in {d.id for d in build_devices(topo, mem, 256)}  # 16160 MiB // 256
    assert f"{u}::mem-63" not in {d.id for d in build_devices(topo, mem, 256)}
    assert memory_units(16160, 256) == 63 and memory_units(16160, 1024) == 15
    assert gpus_of(core, [f"{u}::core-1", f"{u}::core-2"]) == {u: 2}
    for bad, spec in [
        (f"{u}::core-1", gpu),
        (u, core),
        (f"{u}::mem-1", core),
        (f"{u}::core-x", core),
    ]:
        with pytest.raises(DeviceIDError):
            gpu_of(spec, bad)


def test_minor_numbers_from_proc(tmp_path: Path, topo: Topology) -> None:
    g = topo.gpus[2]
    info = tmp_path / "driver" / "nvidia" / "gpus" / g.pci_bus_id.lower()
    info.mkdir(parents=True)
    (info / "information").write_text("Model: Tesla V100\nIRQ: 42\nDevice Minor: 7\n")
    minors = minor_numbers(topo, tmp_path)
    assert minors[2] == 7
    assert minors[0] == 0  # no file: the index
    assert minor_numbers(topo, None) == {g.index: g.index for g in topo.gpus}
