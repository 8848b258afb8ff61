"""The DRA contract (topology/dra.py): device names, slices, attributes, classes, allocations.

The same slices are created in a real kube-apiserver in tests/dra_driver (the API's own
validation); here: the shapes, the limits the 1.36 API sets, and the accounting rules.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import catalog, dra
from topology.colocation.model import DEFAULT_SLOTS
from topology.dra import (
    CLASS_GPU,
    CLASS_SHARE,
    CLASS_SLOT,
    DRIVER,
    ClaimAllocation,
    DeviceKind,
    DRAContractError,
    GpuGrant,
    Holding,
)
from topology.model import GPU, PCIeLevel, Topology

DGX1 = catalog.get("dgx1-v100")


def _devices(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices for d in s["spec"].get("devices", [])]


def _attr(device: dict[str, Any], name: str) -> Any:
    return next(iter(device["attributes"][name].values()))


# --- names ---------------------------------------------------------------------------------
@given(st.integers(0, 255), st.sampled_from(list(DeviceKind)))
def test_device_names_round_trip(index: int, kind: DeviceKind) -> None:
    name = dra.device_name(index, kind)
    assert dra.parse_device_name(name) == dra.DeviceRef(index, kind)
    assert len(name) <= 63 and name == name.lower()


@pytest.mark.parametrize("name", ["gpu", "gpu-", "gpu-01", "gpu-1-mig", "GPU-1", "gpu--1",
                                  "gpu-1-share-2", "cpu-0", ""])
def test_foreign_device_names_are_refused(name: str) -> None:
    with pytest.raises(DRAContractError, match="not a gpu.gputopo.io device name"):
        dra.parse_device_name(name)


def test_device_name_refuses_bad_input() -> None:
    with pytest.raises(DRAContractError):
        dra.device_name(-1)
    with pytest.raises(DRAContractError):
        dra.device_name(0, "mig")


# --- slices --------------------------------------------------------------------------------
def test_dgx1_slices_one_counter_slice_then_devices() -> None:
    slices = dra.resource_slices(DGX1, "dgx-0", generation=4)
    assert len(slices) == 2
    counters, devices = slices
    for k, s in enumerate(slices):
        spec = s["spec"]
        assert s["apiVersion"] == "resource.k8s.io/v1" and s["kind"] == "ResourceSlice"
        assert s["metadata"]["name"] == f"dgx-0-gpu.gputopo.io-{k}"
        assert spec["driver"] == DRIVER and spec["nodeName"] == "dgx-0"
        assert spec["pool"] == {"name": "dgx-0", "generation": 4, "resourceSliceCount": 2}
    assert "devices" not in counters["spec"]
    assert counters["spec"]["sharedCounters"] == [
        {"name": "gpus", "counters": {f"gpu-{i}": {"value": "1"} for i in range(8)}}]
    names = [d["name"] for d in devices["spec"]["devices"]]
    assert names == [n for i in range(8)
                     for n in (f"gpu-{i}", f"gpu-{i}-share", f"gpu-{i}-slot")]


def test_every_device_carries_the_allocator_taint_unless_left_off() -> None:
    """docs/dra.md: kube-scheduler's allocator skips NoSchedule-tainted devices for requests
    not tolerating the taint, so only gputopo's allocator allocates gputopo's devices."""
    assert dra.ALLOCATOR_TAINT == {"key": "gpu.gputopo.io/allocator", "value": "gputopo",
                                   "effect": "NoSchedule"}
    slices = dra.resource_slices(DGX1, "n", unhealthy=frozenset({3}))
    assert "taints" not in slices[0]["spec"]  # the counter slice has no devices
    devices = _devices(slices)
    assert len(devices) == 21
    assert all(d["taints"] == [dra.ALLOCATOR_TAINT] for d in devices)
    assert devices[0]["taints"] is not devices[1]["taints"]  # no shared lists to mutate
    untainted = _devices(dra.resource_slices(DGX1, "n", allocator_taint=False))
    assert len(untainted) == 24 and not any("taints" in d for d in untainted)


def test_every_view_of_a_gpu_consumes_its_one_counter() -> None:
    """One view per GPU: the whole GPU, its share device and its slot device all take the
    GPU's single counter (module docstring: the allocator charges a shared device once)."""
    for d in _devices(dra.resource_slices(DGX1, "n")):
        i = _attr(d, "index")
        assert d["consumesCounters"] == [
            {"counterSet": "gpus", "counters": {f"gpu-{i}": {"value": "1"}}}]
        assert d.get("allowMultipleAllocations", False) == (_attr(d, "type") != "gpu")


def test_dgx1_gpu0_attributes() -> None:
    gpu0 = _devices(dra.resource_slices(DGX1, "n"))[0]
    assert gpu0["attributes"] == {
        "type": {"string": "gpu"},
        "index": {"int": 0},
        "uuid": {"string": DGX1.gpus[0].uuid},
        "productName": {"string": "Tesla V100-SXM2-16GB"},
        "architecture": {"string": "Volta"},
        "nvlinks": {"int": 6},
        "nvlinkPeers": {"string": "1:1,2:1,3:2,4:2"},
        "nvlinkPeerMask": {"int": 0b11110},
        "nvlinkDomain": {"int": 0},
        "nvswitch": {"bool": False},
        "resource.kubernetes.io/pciBusID": {"string": "0000:06:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:06"},
        "resource.kubernetes.io/numaNode": {"int": 0},
    }
    assert gpu0["capacity"] == {"memory": {"value": "16160Mi"}}


def test_share_and_slot_capacities() -> None:
    devices = {d["name"]: d for d in _devices(dra.resource_slices(DGX1, "n", slots=3))}
    share, slot = devices["gpu-5-share"], devices["gpu-5-slot"]
    assert share["capacity"]["compute"] == {"value": "100", "requestPolicy": {
        "default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}}
    assert share["capacity"]["memory"]["value"] == "16160Mi"
    assert slot["capacity"]["slots"] == {"value": "3", "requestPolicy": {
        "default": "1", "validValues": ["1"]}}
    assert slot["capacity"]["memory"]["requestPolicy"]["default"] == "0"
    assert "compute" not in slot["capacity"]


def test_pcie_roots_follow_the_host_bridges() -> None:
    """DGX-1: pairs behind one PLX switch (PIX) share a root; NODE/SYS pairs do not."""
    roots = dra.pcie_roots(DGX1)
    assert roots == {0: "pci0000:06", 1: "pci0000:06", 2: "pci0000:0a", 3: "pci0000:0a",
                     4: "pci0000:85", 5: "pci0000:85", 6: "pci0000:89", 7: "pci0000:89"}
    for a in range(8):
        for b in range(8):
            if a != b:
                same = DGX1.pcie_level(a, b) <= PCIeLevel.PHB
                assert (roots[a] == roots[b]) == same


def test_nvlink_domains_are_connected_components() -> None:
    assert dra.nvlink_domains(DGX1) == [0] * 8
    pcie = catalog.get("pcie-8gpu")
    assert dra.nvlink_domains(pcie) == list(range(8))
    minsky = catalog.get("minsky")
    doms = dra.nvlink_domains(minsky)
    for a in range(minsky.size):
        for b in range(minsky.size):
            if a != b and minsky.nvlinks(a, b):
                assert doms[a] == doms[b]


@pytest.mark.parametrize("name", catalog.names())
def test_every_catalog_machine_fits_the_api_limits(name: str) -> None:
    topo = catalog.get(name)
    slices = dra.resource_slices(topo, "node-a")
    devices = _devices(slices)
    assert len(devices) == 3 * topo.size
    assert sorted(_attr(d, "index") for d in devices if _attr(d, "type") == "gpu") == list(
        range(topo.size))
    for s in slices:
        spec = s["spec"]
        assert ("devices" in spec) != ("sharedCounters" in spec)
        assert len(spec.get("devices", [])) <= 64
        assert len(spec.get("sharedCounters", [])) <= 8
        for cs in spec.get("sharedCounters", []):
            assert len(cs["counters"]) <= 32
    for d in devices:
        assert len(d["attributes"]) + len(d.get("capacity", {})) <= 32
        for value in d["attributes"].values():
            if "string" in value:
                assert len(value["string"]) <= 64
        assert _attr(d, "uuid") == topo.gpus[_attr(d, "index")].uuid


def test_unhealthy_gpus_leave_the_slices() -> None:
    devices = _devices(dra.resource_slices(DGX1, "n", unhealthy=frozenset({2, 5})))
    assert {_attr(d, "index") for d in devices} == {0, 1, 3, 4, 6, 7}
    # the counters stay (they do not depend on health)
    counters = dra.resource_slices(DGX1, "n", unhealthy=frozenset({2, 5}))[0]
    assert len(counters["spec"]["sharedCounters"][0]["counters"]) == 8


def test_no_shares_no_slots() -> None:
    devices = _devices(dra.resource_slices(DGX1, "n", shares=False, slots=0))
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]


def test_unknown_memory_publishes_no_memory_capacity() -> None:
    gpus = [GPU(i, f"GPU-{i}", "", "", 0, None, frozenset()) for i in range(2)]
    topo = Topology.build("t", gpus, {}, PCIeLevel.SYS)
    devices = {d["name"]: d for d in _devices(dra.resource_slices(topo, "n"))}
    assert "capacity" not in devices["gpu-0"]
    assert set(devices["gpu-0-share"]["capacity"]) == {"compute"}
    assert set(devices["gpu-0-slot"]["capacity"]) == {"slots"}
    assert _attr(devices["gpu-0"], "productName") == "unknown"
    assert "resource.kubernetes.io/pciBusID" not in devices["gpu-0"]["attributes"]
    assert "resource.kubernetes.io/numaNode" not in devices["gpu-0"]["attributes"]


def test_large_nodes_split_into_slices_and_counter_sets() -> None:
    n = 40
    gpus = [GPU(i, f"GPU-{i:04d}", f"0000:{i + 1:02X}:00.0", "NVIDIA H100 80GB HBM3", 81559, 0,
                frozenset()) for i in range(n)]
    topo = Topology.build("big", gpus, {(i, j): 18 for i in range(n) for j in range(i + 1, n)},
                          PCIeLevel.SYS, nvswitch=True, nvlink_generation=4)
    slices = dra.resource_slices(topo, "n")
    counters = slices[0]["spec"]["sharedCounters"]
    assert [c["name"] for c in counters] == ["gpus", "gpus-1"]
    assert len(counters[0]["counters"]) == 32 and len(counters[1]["counters"]) == 8
    device_slices = [len(s["spec"]["devices"]) for s in slices[1:]]
    assert device_slices == [63, 57] and all(s["spec"]["pool"]["resourceSliceCount"] == 3
                                            for s in slices)
    gpu39 = next(d for d in _devices(slices) if d["name"] == "gpu-39-slot")
    assert gpu39["consumesCounters"][0]["counterSet"] == "gpus-1"
    # a peer list that does not fit 64 characters is left to nvlinkPeerMask
    assert "nvlinkPeers" not in gpu39["attributes"]
    assert _attr(gpu39, "nvswitch") is True and _attr(gpu39, "architecture") == "Hopper"


@pytest.mark.parametrize(("name", "arch"), [
    ("Tesla V100-SXM2-16GB", "Volta"), ("Tesla P100-SXM2-16GB", "Pascal"),
    ("NVIDIA A100-SXM4-40GB", "Ampere"), ("Tesla T4", "Turing"), ("Tesla P4", "Pascal"),
    ("NVIDIA H100 80GB HBM3", "Hopper"), ("NVIDIA L4", "Ada Lovelace"), ("", "unknown"),
    ("Mystery GPU 9000", "unknown"),
])
def test_architecture_from_product_name(name: str, arch: str) -> None:
    assert dra.architecture(name) == arch


@pytest.mark.parametrize(("bus", "std"), [
    ("0000:0A:00.0", "0000:0a:00.0"), ("00000000:86:00.0", "0000:86:00.0"),
    ("FFFF:03:00.0", "ffff:03:00.0"), ("10000:01:00.0", None), ("", None), ("0:1:2", None),
])
def test_pci_bus_id_standard_form(bus: str, std: str | None) -> None:
    assert dra.pci_bus_id(bus) == std


def test_slice_names_stay_within_the_limit() -> None:
    node = "n" * 250
    name = dra.slice_name(node, 3)
    assert len(name) <= 253 and name.endswith("-gpu.gputopo.io-3")
    assert dra.slice_name(node, 3) != dra.slice_name("m" * 250, 3)


# --- device classes -------------------------------------------------------------------------
def test_device_classes_select_one_type_each() -> None:
    classes = {c["metadata"]["name"]: c for c in dra.device_classes()}
    assert set(classes) == {CLASS_GPU, CLASS_SHARE, CLASS_SLOT}
    for name, kind in dra.CLASS_KINDS.items():
        (sel,) = classes[name]["spec"]["selectors"]
        assert sel["cel"]["expression"] == (
            f'device.driver == "gpu.gputopo.io" && '
            f'device.attributes["gpu.gputopo.io"].type == "{kind.value}"')
        assert "extendedResourceName" not in classes[name]["spec"]
    ext = {c["metadata"]["name"]: c for c in dra.device_classes(
        extended_resource_name="nvidia.com/gpu")}
    assert ext[CLASS_GPU]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "extendedResourceName" not in ext[CLASS_SHARE]["spec"]


# --- quantities -----------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "mib"), [
    ("4Gi", 4096), ("16160Mi", 16160), ("0", 0), ("1", 1), ("1Ki", 1), ("1.5Gi", 1536),
    ("1G", 954), ("2e9", 1908), (1048576, 1), ("512Mi", 512),
])
def test_quantity_mib_rounds_up(text: str | int, mib: int) -> None:
    assert dra.quantity_mib(text) == mib


@pytest.mark.parametrize("text", ["", "4GB", "Gi", "1..2", "-1Mi", "abc"])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(DRAContractError):
        dra.quantity_mib(text)


# --- allocations ----------------------------------------------------------------------------
def test_whole_gpu_results_round_trip_in_order() -> None:
    results = dra.allocation_results("dgx-0", [6, 4, 5, 7], request="gpus")
    assert results[0] == {"request": "gpus", "driver": DRIVER, "pool": "dgx-0",
                          "device": "gpu-6"}
    alloc = dra.claim_allocation(results, pool="dgx-0")
    assert alloc.gpus == (6, 4, 5, 7) and alloc.kind is DeviceKind.GPU
    assert alloc.pool == "dgx-0" and alloc.core_percent == 0


def test_share_result_carries_compute_and_memory() -> None:
    sid = str(uuid.uuid4())
    results = dra.allocation_results("n", [3], request="r", kind=DeviceKind.SHARE,
                                     core_percent=30, memory_mib=4096, share_ids=[sid])
    assert results == [{"request": "r", "driver": DRIVER, "pool": "n", "device": "gpu-3-share",
                        "shareID": sid,
                        "consumedCapacity": {"memory": "4096Mi", "compute": "30"}}]
    alloc = dra.claim_allocation(results)
    assert alloc.grants == (GpuGrant(3, DeviceKind.SHARE, "r", 30, 4096, sid),)


def test_scheduler_written_share_with_qualified_capacity_names() -> None:
    """The scheduler's own consumedCapacity may use other spellings of the same quantity."""
    r = {"request": "r", "driver": DRIVER, "pool": "n", "device": "gpu-1-share",
         "shareID": "x", "consumedCapacity": {"gpu.gputopo.io/memory": "4Gi",
                                              "compute": "25"}}
    assert dra.claim_allocation([r]).grants[0] == GpuGrant(1, DeviceKind.SHARE, "r", 25,
                                                           4096, "x")


def test_other_drivers_are_skipped() -> None:
    results = [{"request": "nic", "driver": "sriov.example.com", "pool": "n", "device": "vf-0"},
               *dra.allocation_results("n", [2], request="g")]
    assert dra.claim_allocation(results).gpus == (2,)
    assert dra.claim_allocation([results[0]]).grants == ()


@pytest.mark.parametrize(("results", "why"), [
    ([{"driver": DRIVER, "pool": "n", "device": "gpu-1"},
      {"driver": DRIVER, "pool": "n", "device": "gpu-1"}], "twice"),
    ([{"driver": DRIVER, "pool": "n", "device": "gpu-1"},
      {"driver": DRIVER, "pool": "n", "device": "gpu-2-share",
       "consumedCapacity": {"compute": "10"}}], "mixes"),
    ([{"driver": DRIVER, "pool": "n", "device": "gpu-1"},
      {"driver": DRIVER, "pool": "m", "device": "gpu-2"}], "spans pools"),
    ([{"driver": DRIVER, "pool": "n", "device": "mig-1"}], "device name"),
    ([{"driver": DRIVER, "pool": "n", "device": "gpu-1", "consumedCapacity": {"memory": "1Mi"}}],
     "whole GPU but consumes"),
    ([{"driver": DRIVER, "pool": "n", "device": "gpu-1-share",
       "consumedCapacity": {"compute": "101"}}], "not 0-100"),
    ([{"driver": DRIVER, "pool": "n", "device": "gpu-1-slot",
       "consumedCapacity": {"compute": "10"}}], "consumes compute"),
    ([{"driver": DRIVER, "pool": "n", "device": "gpu-1-share",
       "consumedCapacity": {"bandwidth": "10"}}], "unknown capacity"),
])
def test_bad_allocations_are_refused(results: list[dict[str, Any]], why: str) -> None:
    with pytest.raises(DRAContractError, match=why):
        dra.claim_allocation(results)


def test_wrong_pool_is_refused() -> None:
    with pytest.raises(DRAContractError, match="not 'n'"):
        dra.claim_allocation(dra.allocation_results("m", [0], request="r"), pool="n")


def test_allocation_results_refuses_bad_input() -> None:
    with pytest.raises(DRAContractError, match="twice"):
        dra.allocation_results("n", [1, 1], request="r")
    with pytest.raises(DRAContractError, match="one GPU with one share ID"):
        dra.allocation_results("n", [1, 2], request="r", kind=DeviceKind.SHARE,
                               share_ids=["a"])
    with pytest.raises(DRAContractError, match="not allowed"):
        dra.allocation_results("n", [1], request="r", kind=DeviceKind.SLOT, core_percent=5,
                               share_ids=["a"])


# --- accounting -----------------------------------------------------------------------------
def _claim(kind: DeviceKind, *gpus: int, core: int = 0, mem: int = 0) -> ClaimAllocation:
    return ClaimAllocation("n", tuple(GpuGrant(g, kind, "r", core, mem) for g in gpus))


def test_accounting_rules() -> None:
    h: dict[int, Holding] = {}
    dra.add_allocation(h, "a", _claim(DeviceKind.GPU, 0, 1), DGX1)
    with pytest.raises(DRAContractError, match="GPU 1 is in use as gpu"):
        dra.add_allocation(h, "b", _claim(DeviceKind.GPU, 2, 1), DGX1)
    assert set(h) == {0, 1}  # unchanged by the refusal (GPU 2 not taken)
    with pytest.raises(DRAContractError, match="cannot also be a share"):
        dra.add_allocation(h, "b", _claim(DeviceKind.SHARE, 0, core=10), DGX1)
    dra.add_allocation(h, "s1", _claim(DeviceKind.SHARE, 2, core=60, mem=8000), DGX1)
    with pytest.raises(DRAContractError, match="110 % of its compute"):
        dra.add_allocation(h, "s2", _claim(DeviceKind.SHARE, 2, core=50), DGX1)
    with pytest.raises(DRAContractError, match="16200 MiB reserved of 16160"):
        dra.add_allocation(h, "s2", _claim(DeviceKind.SHARE, 2, core=10, mem=8200), DGX1)
    dra.add_allocation(h, "s2", _claim(DeviceKind.SHARE, 2, core=40, mem=8160), DGX1)
    assert h[2] == Holding(False, 100, 16160, 2, 0, ("s1", "s2"))
    with pytest.raises(DRAContractError, match="cannot also be a slot"):
        dra.add_allocation(h, "c", _claim(DeviceKind.SLOT, 2), DGX1)
    for k in range(DEFAULT_SLOTS):
        dra.add_allocation(h, f"c{k}", _claim(DeviceKind.SLOT, 3, mem=1000), DGX1)
    with pytest.raises(DRAContractError, match="more than 3 co-location slots"):
        dra.add_allocation(h, "c9", _claim(DeviceKind.SLOT, 3), DGX1)
    with pytest.raises(DRAContractError, match="does not exist"):
        dra.add_allocation(h, "z", _claim(DeviceKind.GPU, 8), DGX1)
    with pytest.raises(DRAContractError, match="already holds"):
        dra.add_allocation(h, "a", _claim(DeviceKind.GPU, 0), DGX1)
    dra.remove_allocation(h, "s1", _claim(DeviceKind.SHARE, 2, core=60, mem=8000))
    dra.remove_allocation(h, "s2", _claim(DeviceKind.SHARE, 2, core=40, mem=8160))
    assert 2 not in h
    dra.add_allocation(h, "w", _claim(DeviceKind.GPU, 2), DGX1)  # free again, whole


_grant = st.one_of(
    st.builds(lambda g: (DeviceKind.GPU, g, 0, 0), st.integers(0, 7)),
    st.builds(lambda g, c, m: (DeviceKind.SHARE, g, c, m), st.integers(0, 7),
              st.integers(0, 100), st.integers(0, 17000)),
    st.builds(lambda g, m: (DeviceKind.SLOT, g, 0, m), st.integers(0, 7),
              st.integers(0, 17000)),
)


@given(st.lists(st.tuples(_grant, st.booleans()), max_size=40))
def test_accepted_allocations_never_break_the_rules(ops: list[tuple[Any, bool]]) -> None:
    """Whatever sequence of claims and releases: no GPU is held whole twice or in two views,
    compute never above 100 %, memory never above the GPU's, slots never above 3."""
    h: dict[int, Holding] = {}
    live: dict[str, ClaimAllocation] = {}
    for n, ((kind, g, core, mem), release) in enumerate(ops):
        if release and live:
            name = sorted(live)[n % len(live)]
            dra.remove_allocation(h, name, live.pop(name))
            continue
        claim = _claim(kind, g, core=core, mem=mem)
        try:
            dra.add_allocation(h, f"c{n}", claim, DGX1)
        except DRAContractError:
            continue
        live[f"c{n}"] = claim
    for g, hold in h.items():
        holders = [c for c in live.values() if c.grants[0].index == g]
        kinds = {c.kind for c in holders}
        assert len(kinds) == 1
        assert hold.kind in kinds
        if hold.whole:
            assert len(holders) == 1
        assert hold.core_percent == sum(c.core_percent for c in holders) <= 100
        assert hold.memory_mib == sum(c.memory_mib for c in holders)
        assert hold.memory_mib <= 16160 or hold.whole
        assert hold.slots <= DEFAULT_SLOTS


def test_node_state_for_the_policies() -> None:
    from topology.colocation.profile import JobProfile
    from topology.policies.base import GPUUsage, Resident

    h: dict[int, Holding] = {}
    dra.add_allocation(h, "a", _claim(DeviceKind.GPU, 0, 1), DGX1)
    dra.add_allocation(h, "b", _claim(DeviceKind.SHARE, 2, core=30, mem=4096), DGX1)
    dra.add_allocation(h, "c", _claim(DeviceKind.SLOT, 3, mem=2048), DGX1)
    with pytest.raises(DRAContractError, match="give its residents"):
        dra.node_state(h)
    job = Resident("ns/c", JobProfile(0.1, 1e6, 1e6, 2048), 2048)
    state = dra.node_state(h, unhealthy=frozenset({7}), residents={3: [job]})
    assert state.free_gpus(DGX1) == (4, 5, 6)
    assert state.used(2) == GPUUsage(30, 4096)
    assert state.used(0).core_percent == 100
    assert state.used(3).residents == (job,)


@given(st.sampled_from(catalog.names()), st.sets(st.integers(0, 15), max_size=4),
       st.integers(0, 4), st.booleans())
def test_slices_are_deterministic_and_count_every_healthy_view(
    name: str, unhealthy: set[int], slots: int, shares: bool
) -> None:
    """The same node, health and settings give byte-for-byte the same slices (the publisher's
    pool hash relies on it); every healthy GPU has exactly its views, none of an unhealthy."""
    topo = catalog.get(name)
    bad = frozenset(i for i in unhealthy if i < topo.size)
    a = dra.resource_slices(topo, "n", unhealthy=bad, slots=slots, shares=shares)
    assert a == dra.resource_slices(topo, "n", unhealthy=bad, slots=slots, shares=shares)
    per_gpu = 1 + shares + (slots > 0)
    names = [d["name"] for d in _devices(a)]
    assert len(names) == len(set(names)) == per_gpu * (topo.size - len(bad))
    assert not any(dra.parse_device_name(n).index in bad for n in names)
