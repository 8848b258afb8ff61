"""The slice publisher (dra_driver/slices.py) against an in-memory store: written once, kept,
repaired; a health change republishes the pool at the next generation without the GPU."""

from __future__ import annotations

from dra_driver.slices import ANN_POOL_HASH, MemorySliceStore, SlicePublisher
from topology import catalog
from topology.dra import ALLOCATOR_TAINT
from topology.model import GPU, PCIeLevel, Topology

TOPO = catalog.get("dgx1-v100")


def _names(store: MemorySliceStore) -> list[str]:
    return [d["name"] for s in store.slices.values() for d in s["spec"].get("devices", [])]


def test_publish_once_then_nothing_to_do() -> None:
    store = MemorySliceStore()
    pub = SlicePublisher(store, TOPO, "n1")
    assert pub.sync(frozenset()) is True
    assert store.writes == 2 and pub.generation == 1
    assert pub.sync(frozenset()) is False and store.writes == 2
    hashes = {s["metadata"]["annotations"][ANN_POOL_HASH] for s in store.slices.values()}
    assert len(hashes) == 1


def test_unhealthy_gpu_leaves_and_comes_back_at_new_generations() -> None:
    store = MemorySliceStore()
    pub = SlicePublisher(store, TOPO, "n1")
    pub.sync(frozenset())
    assert pub.sync(frozenset({3})) is True
    assert {s["spec"]["pool"]["generation"] for s in store.slices.values()} == {2}
    assert not any(n.startswith("gpu-3") for n in _names(store))
    assert len(_names(store)) == 21
    pub.sync(frozenset())
    assert {s["spec"]["pool"]["generation"] for s in store.slices.values()} == {3}
    assert "gpu-3-share" in _names(store)


def test_a_restarted_publisher_continues_the_generation_and_repairs() -> None:
    store = MemorySliceStore()
    SlicePublisher(store, TOPO, "n1").sync(frozenset({1}))
    pub = SlicePublisher(store, TOPO, "n1")
    assert pub.sync(frozenset({1})) is False and pub.generation == 1
    # someone deletes a slice, or edits one: the next sync puts the pool back, one gen up
    del store.slices["n1-gpu.gputopo.io-1"]
    assert pub.sync(frozenset({1})) is True and pub.generation == 2
    store.slices["n1-gpu.gputopo.io-1"]["spec"]["devices"].pop()
    store.slices["n1-gpu.gputopo.io-1"]["metadata"]["annotations"][ANN_POOL_HASH] = "x"
    assert pub.sync(frozenset({1})) is True and len(_names(store)) == 21


def test_slices_the_pool_no_longer_needs_are_deleted() -> None:
    store = MemorySliceStore()
    gpus = [GPU(i, f"GPU-{i:04d}", f"0000:{i + 1:02X}:00.0", "x", 1024, 0, frozenset())
            for i in range(30)]
    big = Topology.build("big", gpus, {}, PCIeLevel.SYS)
    SlicePublisher(store, big, "n1", slots=3).sync(frozenset())
    assert len(store.slices) == 3  # counters + 63 + 27 devices
    SlicePublisher(store, TOPO, "n1", shares=False, slots=0).sync(frozenset())
    assert list(store.slices) == ["n1-gpu.gputopo.io-0", "n1-gpu.gputopo.io-1"]
    assert _names(store) == [f"gpu-{i}" for i in range(8)]
    other = SlicePublisher(store, TOPO, "n2")
    other.sync(frozenset())
    assert len(store.slices) == 4  # another node's pool is not ours to touch


def test_a_real_node_reads_pcie_roots_from_sysfs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """As k8s.io/dynamic-resource-allocation/deviceattribute does: /sys/bus/pci/devices/<bdf>
    links into /sys/devices/pci<domain>:<bus>/...; GPUs without a link keep the topology's."""
    import os

    from dra_driver.driver import sysfs_pcie_roots
    from topology.dra import pcie_roots

    devices = tmp_path / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:02.0/0000:03:00.0/0000:06:00.0",
               devices / "0000:06:00.0")
    os.symlink("../../../devices/pci0000:80/0000:80:01.0/0000:85:00.0",
               devices / "0000:85:00.0")
    roots = sysfs_pcie_roots(TOPO, tmp_path)
    assert roots[0] == "pci0000:00" and roots[4] == "pci0000:80"
    assert roots[1] == pcie_roots(TOPO)[1]  # no link: derived from the PCIe levels


def test_the_allocator_taint_is_on_every_device_unless_left_off() -> None:
    store = MemorySliceStore()
    SlicePublisher(store, TOPO, "n1").sync(frozenset())
    devices = [d for s in store.slices.values() for d in s["spec"].get("devices", [])]
    assert len(devices) == 24 and all(d["taints"] == [ALLOCATOR_TAINT] for d in devices)
    # leaving it off is a content change: the pool is republished one generation up
    pub = SlicePublisher(store, TOPO, "n1", allocator_taint=False)
    assert pub.sync(frozenset()) is True and pub.generation == 2
    assert not any("taints" in d for s in store.slices.values()
                   for d in s["spec"].get("devices", []))
