"""The DRA contract: what gputopo's DRA driver publishes and what an allocation means (pure).

Both DRA halves build on this module and neither owns it (docs/dra-driver.md,
/work/notes/dra-contract.md): the node side (``dra_driver/``: ResourceSlices, kubelet
``NodePrepareResources``, CDI) and the control side (whoever writes a claim's
``status.allocation`` with the GPU set a placement policy chose). No Kubernetes client here:
objects are plain ``dict``s in the ``resource.k8s.io/v1`` wire shape.

**Driver and pool.** Driver :data:`DRIVER` (``gpu.gputopo.io``); one pool per node, named
after the node (:func:`pool_name`), ``spec.nodeName`` set on every slice.

**Devices.** Three views of each healthy GPU ``i`` (an unhealthy GPU has none: it leaves the
slices):

=====================  =======================  =============================================
device                 DeviceClass              what one allocation of it is
=====================  =======================  =============================================
``gpu-<i>``            :data:`CLASS_GPU`        the whole GPU (exclusive)
``gpu-<i>-share``      :data:`CLASS_SHARE`      a vGPU share: ``compute`` percent and
                                                ``memory`` of the GPU (consumable capacity,
                                                KEP-5075; ``allowMultipleAllocations``)
``gpu-<i>-slot``       :data:`CLASS_SLOT`       one co-location slot (Tabrizian, under MPS) and
                                                the ``memory`` reserved for it (consumable
                                                capacity: ``slots`` = slots per GPU, each
                                                allocation takes exactly 1)
=====================  =======================  =============================================

**One view at a time** (the device plugin's rule, :class:`topology.policies.base.GPUUsage`:
a GPU is idle, held whole, split into shares, or shared by co-located jobs, never two at
once) is a partitionable-devices counter (KEP-4815): counter set :data:`COUNTER_SET` holds a
counter ``gpu-<i>`` of value 1 per GPU, and all three devices of GPU ``i`` consume it. The
1.36 allocator (``k8s.io/dynamic-resource-allocation/structured/internal/incubating``,
``allocateDevice``) charges a multi-allocatable device's counters once, when its first share
is taken ("Skip counter availability check for devices that allow multiple allocation and
some capacity has already in-use"), and a device counts as allocated while any share of it
is (``internal.IsDeviceAllocated``), so: while any share of GPU ``i`` exists, neither
``gpu-<i>`` nor ``gpu-<i>-slot`` can be allocated, and so on for each view. Within the share
view, consumable capacity keeps ``Σ compute ≤ 100`` and ``Σ memory ≤`` the GPU's memory;
within the slot view, ``slots`` keeps at most :data:`~topology.colocation.model.DEFAULT_SLOTS`
(configurable) co-located jobs and ``memory`` keeps their reservations within the GPU. The
1.36 API wants counters and devices in separate slices of the pool (``only one of
sharedCounters or devices is allowed``), and at most 64 devices per slice once devices
consume counters: :func:`resource_slices` returns the counter slice first, then the devices
in slices of whole GPUs.

**The allocator taint.** Every device carries :data:`ALLOCATOR_TAINT`
(``gpu.gputopo.io/allocator=gputopo:NoSchedule``; DRADeviceTaints, beta and on in 1.36), so
kube-scheduler's own allocator never first-fits a claim on them (``incubating``
``taintPreventsAllocation``); gputopo's allocator writes the allocations, and allocated claims
schedule and are prepared regardless (only NoExecute evicts). ``allocator_taint=False`` leaves
it off for clusters where kube-scheduler allocates.

**Attributes** (driver domain unless qualified): ``type`` (``gpu``/``share``/``slot``),
``index`` (int), ``uuid``, ``productName``, ``architecture`` (from the product name,
:func:`architecture`), ``nvlinkPeers`` (``"<peer>:<links>,…"``), ``nvlinkPeerMask`` (int, bit
``j`` set when GPU ``j`` is NVLinked), ``nvlinks`` (int, the GPU's NVLinks), ``nvlinkDomain``
(int, lowest index of the GPU's NVLink-connected component: ``matchAttribute`` on it keeps a
claim inside one NVLink island), ``nvswitch`` (bool), and the standard
``resource.kubernetes.io/pciBusID`` (lower-case ``dddd:bb:dd.f``), ``…/pcieRoot``
(``pci<domain>:<bus>``) and ``…/numaNode`` (int). Capacity ``memory`` (MiB as a quantity,
e.g. ``16160Mi``) on every view when the GPU's memory is known; ``compute`` (``100``) on
shares; ``slots`` on slots.

**Allocations.** A claim's ``status.allocation.devices.results`` entries of this driver map
back with :func:`claim_allocation` (device name → GPU index and view; a share's
``consumedCapacity`` → compute percent and MiB); :func:`allocation_results` writes them.
:func:`add_allocation` adds one claim's GPUs to a per-GPU :class:`Holding` map under the rules
above and raises when they would be broken: what the driver checks before preparing a claim,
and what an allocator can check before writing one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from fractions import Fraction
from typing import Any

from topology.colocation.model import DEFAULT_SLOTS
from topology.model import PCIeLevel, Topology
from topology.policies.base import FULL_CORE, GPUUsage, NodeState, Resident, add_grant

# --- names ------------------------------------------------------------------------------
#: The driver name: ResourceSlices' ``spec.driver``, allocation results' ``driver``, the
#: kubelet plugin's registration name.
DRIVER = "gpu.gputopo.io"
#: ``apiVersion`` of every object here.
API_VERSION = "resource.k8s.io/v1"
#: DeviceClass of whole GPUs.
CLASS_GPU = "gpu.gputopo.io"
#: DeviceClass of vGPU shares (compute percent + memory of one GPU).
CLASS_SHARE = "share.gpu.gputopo.io"
#: DeviceClass of co-location slots (one job sharing one GPU under MPS).
CLASS_SLOT = "slot.gpu.gputopo.io"
#: Prefix of the standard attributes (``k8s.io/dynamic-resource-allocation/deviceattribute``).
STANDARD_PREFIX = "resource.kubernetes.io/"

ATTR_TYPE = "type"
ATTR_INDEX = "index"
ATTR_UUID = "uuid"
ATTR_PRODUCT_NAME = "productName"
ATTR_ARCHITECTURE = "architecture"
ATTR_NVLINK_PEERS = "nvlinkPeers"
ATTR_NVLINK_PEER_MASK = "nvlinkPeerMask"
ATTR_NVLINKS = "nvlinks"
ATTR_NVLINK_DOMAIN = "nvlinkDomain"
ATTR_NVSWITCH = "nvswitch"
ATTR_PCI_BUS_ID = STANDARD_PREFIX + "pciBusID"
ATTR_PCIE_ROOT = STANDARD_PREFIX + "pcieRoot"
ATTR_NUMA_NODE = STANDARD_PREFIX + "numaNode"

#: Capacity names (driver domain).
CAP_MEMORY = "memory"
CAP_COMPUTE = "compute"
CAP_SLOTS = "slots"

#: The counter set holding one counter per GPU (``gpu-<i>``, value 1); sets of at most
#: :data:`COUNTERS_PER_SET` counters, named ``gpus``, ``gpus-1``, … for larger nodes.
COUNTER_SET = "gpus"
COUNTERS_PER_SET = 32  # ResourceSliceMaxCountersPerCounterSet
MAX_COUNTER_SETS = 8  # ResourceSliceMaxCounterSets
#: Devices per slice once they consume counters (ResourceSliceMaxDevicesWithAdvancedFeatures).
MAX_DEVICES_PER_SLICE = 64
#: Longest string attribute value (DeviceAttributeMaxValueLength).
MAX_STRING_ATTRIBUTE = 64
#: The taint on every device (docs/dra.md, "No race with kube-scheduler's own allocator"):
#: kube-scheduler's structured allocator skips NoSchedule-tainted devices for every request
#: not tolerating the taint, whatever the class, so only gputopo's allocator (which ignores
#: it) allocates them; claims it has allocated schedule and are prepared as usual.
ALLOCATOR_TAINT: Mapping[str, str] = {
    "key": f"{DRIVER}/allocator", "value": "gputopo", "effect": "NoSchedule"}


class DRAContractError(ValueError):
    """A device name, an allocation result or a quantity does not follow the contract, or an
    allocation would break its accounting rules; the message is one line."""


class DeviceKind(StrEnum):
    """The view of a GPU a device is (its ``type`` attribute)."""

    GPU = "gpu"
    SHARE = "share"
    SLOT = "slot"


#: DeviceClass name → the kind of device it selects.
CLASS_KINDS: Mapping[str, DeviceKind] = {
    CLASS_GPU: DeviceKind.GPU, CLASS_SHARE: DeviceKind.SHARE, CLASS_SLOT: DeviceKind.SLOT,
}


@dataclass(frozen=True)
class DeviceRef:
    """What a device name stands for: GPU ``index`` seen as ``kind``."""

    index: int
    kind: DeviceKind = DeviceKind.GPU

    @property
    def name(self) -> str:
        """The device name (:func:`device_name`)."""
        return device_name(self.index, self.kind)


def device_name(index: int, kind: DeviceKind | str = DeviceKind.GPU) -> str:
    """``gpu-<index>``, ``gpu-<index>-share`` or ``gpu-<index>-slot``.

    Raises:
        DRAContractError: ``index`` is negative or ``kind`` unknown.
    """
    if index < 0:
        raise DRAContractError(f"GPU index {index} is negative")
    try:
        k = DeviceKind(kind)
    except ValueError:
        raise DRAContractError(f"unknown device kind {kind!r}") from None
    return f"gpu-{index}" if k is DeviceKind.GPU else f"gpu-{index}-{k.value}"


_NAME = re.compile(r"^gpu-(0|[1-9][0-9]{0,3})(?:-(share|slot))?$")


def parse_device_name(name: str) -> DeviceRef:
    """The inverse of :func:`device_name`.

    Raises:
        DRAContractError: ``name`` is not one of this driver's device names.
    """
    m = _NAME.match(name)
    if m is None:
        raise DRAContractError(
            f"{name!r} is not a {DRIVER} device name (gpu-<i>, gpu-<i>-share, gpu-<i>-slot)"
        )
    return DeviceRef(int(m.group(1)), DeviceKind(m.group(2) or "gpu"))


def pool_name(node: str) -> str:
    """The pool of ``node``'s devices: the node name."""
    return node


def counter_name(index: int) -> str:
    """The counter of GPU ``index`` in its counter set."""
    return f"gpu-{index}"


def counter_set_name(index: int) -> str:
    """The counter set holding GPU ``index``'s counter (``gpus`` for GPUs 0-31, ``gpus-1`` for
    32-63, …)."""
    k = index // COUNTERS_PER_SET
    return COUNTER_SET if k == 0 else f"{COUNTER_SET}-{k}"


# --- attributes ----------------------------------------------------------------------------
#: Product-name token → architecture (the first token of the name found here wins; NVML's
#: ``nvmlDeviceGetArchitecture`` names the same families).
ARCHITECTURES: Mapping[str, str] = {
    "K80": "Kepler", "K40": "Kepler",
    "P100": "Pascal", "P40": "Pascal", "P4": "Pascal",
    "V100": "Volta", "V100S": "Volta",
    "T4": "Turing",
    "A100": "Ampere", "A800": "Ampere", "A30": "Ampere", "A40": "Ampere", "A10": "Ampere",
    "A16": "Ampere", "A2": "Ampere",
    "L4": "Ada Lovelace", "L40": "Ada Lovelace", "L40S": "Ada Lovelace",
    "H100": "Hopper", "H800": "Hopper", "H200": "Hopper", "GH200": "Hopper",
    "B100": "Blackwell", "B200": "Blackwell", "GB200": "Blackwell", "B300": "Blackwell",
}  # fmt: skip


def architecture(product_name: str) -> str:
    """The GPU architecture of ``product_name`` (``Tesla V100-SXM2-16GB`` → ``Volta``);
    ``unknown`` when no token of the name is in :data:`ARCHITECTURES`."""
    for token in re.split(r"[^A-Za-z0-9]+", product_name.upper()):
        if token in ARCHITECTURES:
            return ARCHITECTURES[token]
    return "unknown"


def pci_bus_id(bus_id: str) -> str | None:
    """The standard ``pciBusID`` form (``dddd:bb:dd.f``, lower case) of a topology bus id
    (``0000:0A:00.0`` or NVML's 8-digit domain); None when it has no such form."""
    m = re.match(r"^([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$",
                 bus_id.strip())
    if m is None or int(m.group(1), 16) > 0xFFFF:
        return None
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def _components(n: int, joined: Iterable[tuple[int, int]]) -> list[int]:
    """Union-find: each of ``n`` items → the lowest item of its component."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in joined:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return [find(i) for i in range(n)]


def pcie_roots(topology: Topology) -> dict[int, str]:
    """GPU index → its ``pcieRoot`` value as the topology implies it.

    GPUs that meet at ``PIX``, ``PXB`` or ``PHB`` (``nvidia-smi topo -m``: at most through
    one PCIe host bridge) hang off one root complex; ``NODE`` and ``SYS`` cross host bridges.
    A root is named ``pci<domain>:<bus>`` after the lowest PCI bus id among its GPUs. On a
    real node the driver reads the true root from sysfs instead (``/sys/bus/pci/devices/<bus
    id>`` links into ``/sys/devices/pci<domain>:<bus>/…``, as the upstream ``deviceattribute``
    helper does) and passes it to :func:`resource_slices`; GPUs whose bus id has no standard
    form get no root.
    """
    n = topology.size
    joined = [(a, b) for a in range(n) for b in range(a + 1, n)
              if topology.links[a][b].pcie <= PCIeLevel.PHB]
    comp = _components(n, joined)
    out: dict[int, str] = {}
    for i in range(n):
        members = sorted(pci_bus_id(topology.gpus[j].pci_bus_id) or "" for j in range(n)
                         if comp[j] == comp[i])
        members = [m for m in members if m]
        if members and pci_bus_id(topology.gpus[i].pci_bus_id):
            domain, bus = members[0].split(":")[:2]
            out[i] = f"pci{domain}:{bus}"
    return out


def nvlink_domains(topology: Topology) -> list[int]:
    """GPU index → the lowest index of its NVLink-connected component (itself without
    NVLinks)."""
    n = topology.size
    return _components(n, [(a, b) for a in range(n) for b in range(a + 1, n)
                           if topology.links[a][b].nvlinks > 0])


def nvlink_peers(topology: Topology, index: int) -> list[tuple[int, int]]:
    """``(peer, NVLinks)`` of GPU ``index``, by peer index."""
    return [(j, topology.links[index][j].nvlinks) for j in range(topology.size)
            if j != index and topology.links[index][j].nvlinks > 0]


def _int(v: int) -> dict[str, Any]:
    return {"int": v}


def _str(v: str) -> dict[str, Any]:
    return {"string": v[:MAX_STRING_ATTRIBUTE]}


def mib_quantity(mib: int) -> str:
    """A MiB count as a Kubernetes quantity (``16160Mi``)."""
    return f"{mib}Mi"


def gpu_attributes(
    topology: Topology, index: int, *, roots: Mapping[int, str] | None = None
) -> dict[str, dict[str, Any]]:
    """The attributes every device of GPU ``index`` carries (not ``type``), in the API's
    ``{name: {"int"|"string"|"bool": value}}`` shape.

    Args:
        topology: the node.
        index: the GPU.
        roots: GPU index → ``pcieRoot`` (default :func:`pcie_roots` of ``topology``); a GPU
            missing from it gets no ``pcieRoot``.
    """
    g = topology.gpus[index]
    peers = nvlink_peers(topology, index)
    peer_text = ",".join(f"{j}:{c}" for j, c in peers)
    attrs: dict[str, dict[str, Any]] = {
        ATTR_INDEX: _int(index),
        ATTR_UUID: _str(g.uuid),
        ATTR_PRODUCT_NAME: _str(g.name or "unknown"),
        ATTR_ARCHITECTURE: _str(architecture(g.name)),
        ATTR_NVLINKS: _int(sum(c for _j, c in peers)),
        ATTR_NVLINK_PEER_MASK: _int(sum(1 << j for j, _c in peers if j < 63)),
        ATTR_NVLINK_DOMAIN: _int(nvlink_domains(topology)[index]),
        ATTR_NVSWITCH: {"bool": bool(topology.nvswitch and peers)},
    }
    if len(peer_text) <= MAX_STRING_ATTRIBUTE:
        attrs[ATTR_NVLINK_PEERS] = _str(peer_text)
    bus = pci_bus_id(g.pci_bus_id)
    if bus is not None:
        attrs[ATTR_PCI_BUS_ID] = _str(bus)
    root = (pcie_roots(topology) if roots is None else roots).get(index)
    if root:
        attrs[ATTR_PCIE_ROOT] = _str(root)
    if g.numa_node is not None:
        attrs[ATTR_NUMA_NODE] = _int(g.numa_node)
    return attrs


def _consumes(index: int) -> list[dict[str, Any]]:
    return [{"counterSet": counter_set_name(index),
             "counters": {counter_name(index): {"value": "1"}}}]


def gpu_devices(
    topology: Topology, index: int, *, slots: int = DEFAULT_SLOTS, shares: bool = True,
    roots: Mapping[int, str] | None = None,
) -> list[dict[str, Any]]:
    """The devices of GPU ``index``: ``gpu-<i>``, then ``gpu-<i>-share`` (when ``shares``),
    then ``gpu-<i>-slot`` (when ``slots`` > 0), in the API's ``Device`` shape."""
    base = gpu_attributes(topology, index, roots=roots)
    memory = topology.gpus[index].memory_mib
    mem_cap: dict[str, Any] = {"value": mib_quantity(memory)} if memory > 0 else {}

    def with_type(kind: DeviceKind) -> dict[str, dict[str, Any]]:
        return {ATTR_TYPE: _str(kind.value), **base}

    def shared_memory() -> dict[str, Any]:
        return {**mem_cap, "requestPolicy": {
            "default": "0", "validRange": {"min": "0", "step": "1Mi"}}}

    out: list[dict[str, Any]] = [{
        "name": device_name(index),
        "attributes": with_type(DeviceKind.GPU),
        "capacity": {CAP_MEMORY: mem_cap} if mem_cap else {},
        "consumesCounters": _consumes(index),
    }]
    if shares:
        cap: dict[str, Any] = {CAP_COMPUTE: {"value": str(FULL_CORE), "requestPolicy": {
            "default": "0", "validRange": {"min": "0", "max": str(FULL_CORE), "step": "1"}}}}
        if mem_cap:
            cap[CAP_MEMORY] = shared_memory()
        out.append({
            "name": device_name(index, DeviceKind.SHARE),
            "attributes": with_type(DeviceKind.SHARE),
            "capacity": cap,
            "consumesCounters": _consumes(index),
            "allowMultipleAllocations": True,
        })
    if slots > 0:
        cap = {CAP_SLOTS: {"value": str(slots), "requestPolicy": {
            "default": "1", "validValues": ["1"]}}}
        if mem_cap:
            cap[CAP_MEMORY] = shared_memory()
        out.append({
            "name": device_name(index, DeviceKind.SLOT),
            "attributes": with_type(DeviceKind.SLOT),
            "capacity": cap,
            "consumesCounters": _consumes(index),
            "allowMultipleAllocations": True,
        })
    for d in out:
        if not d["capacity"]:
            del d["capacity"]
    return out


def counter_sets(topology: Topology) -> list[dict[str, Any]]:
    """The pool's counter sets: one counter ``gpu-<i>`` of value 1 per GPU (healthy or not,
    so the sets do not change with health).

    Raises:
        DRAContractError: more GPUs than the API's counter sets can hold (256).
    """
    if topology.size > COUNTERS_PER_SET * MAX_COUNTER_SETS:
        raise DRAContractError(f"{topology.size} GPUs: more than the "
                               f"{COUNTERS_PER_SET * MAX_COUNTER_SETS} one pool can count")
    sets: dict[str, dict[str, Any]] = {}
    for g in topology.gpus:
        sets.setdefault(counter_set_name(g.index), {})[counter_name(g.index)] = {"value": "1"}
    return [{"name": name, "counters": counters} for name, counters in sets.items()]


def slice_name(node: str, k: int) -> str:
    """Object name of slice ``k`` of ``node``'s pool (``<node>-gpu.gputopo.io-<k>``; hashed
    when that would pass the 253-character limit)."""
    name = f"{node}-{DRIVER}-{k}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:12]
    return f"{node[:200].rstrip('.-')}-{digest}-{DRIVER}-{k}"


def resource_slices(
    topology: Topology, node: str, *, generation: int = 1,
    unhealthy: frozenset[int] = frozenset(), slots: int = DEFAULT_SLOTS, shares: bool = True,
    roots: Mapping[int, str] | None = None, allocator_taint: bool = True,
) -> list[dict[str, Any]]:
    """Every ResourceSlice of ``node``'s pool, complete objects (apiVersion, kind, metadata
    name, spec): slice 0 holds :func:`counter_sets`, the next ones the devices of the healthy
    GPUs in index order (whole GPUs of one slice together; at most
    :data:`MAX_DEVICES_PER_SLICE` devices a slice). Slice order is the allocator's order when
    it searches (first fit), and within a slice device order.

    Args:
        topology: the node's GPUs.
        node: the node name (pool name and ``spec.nodeName``).
        generation: the pool generation; the publisher raises it with every change.
        unhealthy: indices of GPUs left out (no device, so nothing can be allocated on them).
        slots: co-location slots per GPU (0: no ``-slot`` devices).
        shares: publish ``-share`` devices.
        roots: GPU index → ``pcieRoot`` (default :func:`pcie_roots`).
        allocator_taint: put :data:`ALLOCATOR_TAINT` on every device (False: kube-scheduler
            allocates the devices itself, by first fit).

    Raises:
        DRAContractError: a node too large for one pool's counters.
    """
    roots = pcie_roots(topology) if roots is None else roots
    per_gpu = [gpu_devices(topology, g.index, slots=slots, shares=shares, roots=roots)
               for g in topology.gpus if g.index not in unhealthy]
    if allocator_taint:
        for devs in per_gpu:
            for d in devs:
                d["taints"] = [dict(ALLOCATOR_TAINT)]
    chunks: list[list[dict[str, Any]]] = []
    for devs in per_gpu:
        if not chunks or len(chunks[-1]) + len(devs) > MAX_DEVICES_PER_SLICE:
            chunks.append([])
        chunks[-1].extend(devs)
    specs: list[dict[str, Any]] = [{"sharedCounters": counter_sets(topology)}]
    specs += [{"devices": c} for c in chunks]
    count = len(specs)
    return [{
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node, k)},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": pool_name(node), "generation": generation,
                     "resourceSliceCount": count},
            **body,
        },
    } for k, body in enumerate(specs)]


def device_classes(*, extended_resource_name: str | None = None) -> list[dict[str, Any]]:
    """The three DeviceClasses: :data:`CLASS_GPU`, :data:`CLASS_SHARE`, :data:`CLASS_SLOT`,
    each selecting this driver's devices of one ``type`` by CEL.

    Args:
        extended_resource_name: set ``spec.extendedResourceName`` of the whole-GPU class
            (KEP-5004, e.g. ``nvidia.com/gpu``: pods asking that extended resource are served
            by this class); None leaves it out.
    """
    out = []
    for name, kind in CLASS_KINDS.items():
        expr = (f'device.driver == "{DRIVER}" && '
                f'device.attributes["{DRIVER}"].{ATTR_TYPE} == "{kind.value}"')
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expr}}]}
        if kind is DeviceKind.GPU and extended_resource_name:
            spec["extendedResourceName"] = extended_resource_name
        out.append({"apiVersion": API_VERSION, "kind": "DeviceClass",
                    "metadata": {"name": name}, "spec": spec})
    return out


# --- quantities -----------------------------------------------------------------------------
_SUFFIX: Mapping[str, Fraction] = {
    "": Fraction(1), "m": Fraction(1, 1000), "k": Fraction(10**3), "M": Fraction(10**6),
    "G": Fraction(10**9), "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:[eE]([+-]?[0-9]+))?"
                       r"(|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)$")


def parse_quantity(text: str | int) -> Fraction:
    """A Kubernetes quantity (``4Gi``, ``300``, ``1.5G``, ``500m``) as an exact number.

    Raises:
        DRAContractError: not a quantity.
    """
    if isinstance(text, int):
        return Fraction(text)
    m = _QUANTITY.match(str(text).strip())
    if m is None:
        raise DRAContractError(f"{text!r} is not a Kubernetes quantity")
    value = Fraction(m.group(1)) * _SUFFIX[m.group(3)]
    if m.group(2):
        value *= Fraction(10) ** int(m.group(2))
    return value


def quantity_mib(text: str | int) -> int:
    """A memory quantity in whole MiB, rounded up (``4Gi`` → 4096).

    Raises:
        DRAContractError: not a quantity, or negative.
    """
    value = parse_quantity(text)
    if value < 0:
        raise DRAContractError(f"memory {text!r} is negative")
    mib = value / (1 << 20)
    return int(mib) + (mib.denominator != 1)


# --- allocations ----------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuGrant:
    """One of this driver's devices in a claim's allocation.

    Attributes:
        index: the GPU.
        kind: the view allocated (whole, share, slot).
        request: the claim request it satisfies (``request`` of the result).
        core_percent: a share's compute, percent of the GPU (0 for whole GPUs and slots).
        memory_mib: a share's or slot's memory, MiB (0 for whole GPUs).
        share_id: ``shareID`` of a share or slot result (consumable capacity), else None.
    """

    index: int
    kind: DeviceKind = DeviceKind.GPU
    request: str = ""
    core_percent: int = 0
    memory_mib: int = 0
    share_id: str | None = None

    @property
    def device(self) -> str:
        """The device name."""
        return device_name(self.index, self.kind)


@dataclass(frozen=True)
class ClaimAllocation:
    """This driver's part of one claim's allocation, on one node.

    Attributes:
        pool: the pool (node name) the devices come from.
        grants: the devices, in the allocation's order (the order ``CUDA_VISIBLE_DEVICES``
            lists them in: a pattern's arrangement when the allocator wrote one).
    """

    pool: str
    grants: tuple[GpuGrant, ...] = field(default_factory=tuple)

    @property
    def gpus(self) -> tuple[int, ...]:
        """GPU indices, allocation order, each once."""
        return tuple(dict.fromkeys(g.index for g in self.grants))

    @property
    def kind(self) -> DeviceKind:
        """The view of every grant (:func:`claim_allocation` refuses mixed claims)."""
        return self.grants[0].kind if self.grants else DeviceKind.GPU

    @property
    def core_percent(self) -> int:
        """Compute of a share claim, percent (0 otherwise)."""
        return sum(g.core_percent for g in self.grants)

    @property
    def memory_mib(self) -> int:
        """Memory of a share or slot claim, MiB (0 otherwise)."""
        return sum(g.memory_mib for g in self.grants)


def _grant(result: Mapping[str, Any]) -> GpuGrant:
    ref = parse_device_name(str(result.get("device", "")))
    consumed = result.get("consumedCapacity") or {}
    if not isinstance(consumed, Mapping):
        raise DRAContractError(f"device {ref.name}: consumedCapacity is not a mapping")
    core = mem = 0
    for key, value in consumed.items():
        name = str(key).removeprefix(DRIVER + "/")
        if name == CAP_COMPUTE:
            c = parse_quantity(value)
            if c.denominator != 1 or not 0 <= c <= FULL_CORE:
                raise DRAContractError(f"device {ref.name}: compute {value!r} is not 0-100")
            core = int(c)
        elif name == CAP_MEMORY:
            mem = quantity_mib(value)
        elif name != CAP_SLOTS:
            raise DRAContractError(f"device {ref.name}: unknown capacity {key!r}")
    if ref.kind is DeviceKind.GPU and consumed:
        raise DRAContractError(f"device {ref.name} is a whole GPU but consumes capacity")
    if ref.kind is DeviceKind.SLOT and core:
        raise DRAContractError(f"device {ref.name} is a co-location slot but consumes compute")
    share = result.get("shareID")
    return GpuGrant(ref.index, ref.kind, str(result.get("request", "")), core, mem,
                    str(share) if share else None)


def claim_allocation(
    results: Iterable[Mapping[str, Any]], *, pool: str | None = None
) -> ClaimAllocation:
    """This driver's devices in a claim's ``status.allocation.devices.results``.

    Results of other drivers are skipped. A claim holds whole GPUs (any number, each once), or
    shares, or slots, never two views; every share/slot is on its own GPU.

    Args:
        results: the claim's results (API dicts: ``request``, ``driver``, ``pool``,
            ``device``, optional ``shareID`` and ``consumedCapacity``).
        pool: when given, results from another pool are an error (a claim prepared on the
            wrong node).

    Raises:
        DRAContractError: a result that is not an object, a device name, capacity or pool
            that is not ours or not allowed, a GPU listed twice, or views mixed.
    """
    grants: list[GpuGrant] = []
    pools: set[str] = set()
    for r in results:
        if not isinstance(r, Mapping):
            raise DRAContractError(f"an allocation result is {type(r).__name__}, not an object")
        if r.get("driver") != DRIVER:
            continue
        p = str(r.get("pool", ""))
        if pool is not None and p != pool:
            raise DRAContractError(f"device {r.get('device')} is from pool {p!r}, not {pool!r}")
        pools.add(p)
        grants.append(_grant(r))
    if len(pools) > 1:
        raise DRAContractError(f"one claim spans pools {sorted(pools)}")
    seen: set[int] = set()
    for g in grants:
        if g.index in seen:
            raise DRAContractError(f"GPU {g.index} is allocated twice in one claim")
        seen.add(g.index)
    kinds = {g.kind for g in grants}
    if len(kinds) > 1:
        raise DRAContractError(
            f"a claim mixes {' and '.join(sorted(k.value for k in kinds))} devices of {DRIVER}")
    return ClaimAllocation(next(iter(pools), pool or ""), tuple(grants))


def allocation_results(
    node: str, gpus: Sequence[int], *, request: str, kind: DeviceKind = DeviceKind.GPU,
    core_percent: int = 0, memory_mib: int = 0, share_ids: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The ``status.allocation.devices.results`` entries giving ``gpus`` (in this order) of
    ``node`` to ``request`` — the inverse of :func:`claim_allocation`.

    Args:
        node: the node (pool).
        gpus: GPU indices; exactly one for a share or a slot.
        request: the claim's request name.
        kind: the view.
        core_percent: a share's compute percent.
        memory_mib: a share's or slot's memory, MiB.
        share_ids: one ``shareID`` (a UID) per share/slot device, as consumable capacity
            requires; the caller generates them (e.g. ``uuid.uuid4()``).

    Raises:
        DRAContractError: a share/slot not on exactly one GPU or without its share ID, a GPU
            listed twice, or compute outside 0-100.
    """
    if len(set(gpus)) != len(gpus):
        raise DRAContractError("a GPU is listed twice")
    base = {"request": request, "driver": DRIVER, "pool": pool_name(node)}
    if kind is DeviceKind.GPU:
        return [{**base, "device": device_name(i)} for i in gpus]
    if len(gpus) != 1 or len(share_ids) != 1:
        raise DRAContractError(f"a {kind.value} is one GPU with one share ID")
    if not 0 <= core_percent <= FULL_CORE or (kind is DeviceKind.SLOT and core_percent):
        raise DRAContractError(f"compute {core_percent} is not allowed for a {kind.value}")
    consumed: dict[str, str] = {CAP_MEMORY: mib_quantity(memory_mib)}
    if kind is DeviceKind.SHARE:
        consumed[CAP_COMPUTE] = str(core_percent)
    else:
        consumed[CAP_SLOTS] = "1"
    return [{**base, "device": device_name(gpus[0], kind), "shareID": share_ids[0],
             "consumedCapacity": consumed}]


@dataclass(frozen=True)
class Holding:
    """What is held of one GPU through this driver (the DRA form of
    :class:`topology.policies.base.GPUUsage`).

    Attributes:
        whole: held whole by a claim.
        core_percent: Σ compute of its shares, percent.
        memory_mib: Σ memory of its shares and slots, MiB.
        shares: number of shares.
        slots: number of co-location slots taken.
        claims: keys of the claims holding it.
    """

    whole: bool = False
    core_percent: int = 0
    memory_mib: int = 0
    shares: int = 0
    slots: int = 0
    claims: tuple[str, ...] = ()

    @property
    def kind(self) -> DeviceKind | None:
        """The view it is used through, None when idle."""
        if self.whole:
            return DeviceKind.GPU
        if self.shares:
            return DeviceKind.SHARE
        if self.slots:
            return DeviceKind.SLOT
        return None


def add_allocation(
    holdings: dict[int, Holding], claim: str, alloc: ClaimAllocation, topology: Topology, *,
    slots: int = DEFAULT_SLOTS,
) -> None:
    """Add ``claim``'s GPUs to ``holdings`` (GPU index → :class:`Holding`), in place, under
    the accounting rules: one view per GPU; a whole GPU held once; Σ compute ≤ 100 and Σ
    memory ≤ the GPU's memory (when known) over its shares; at most ``slots`` slots and their
    memory within the GPU's. ``holdings`` is unchanged when this raises.

    Raises:
        DRAContractError: the claim would break a rule (the message names the GPU and the
            rule), or names a GPU ``topology`` does not have.
    """
    staged = dict(holdings)
    for g in alloc.grants:
        if not 0 <= g.index < topology.size:
            raise DRAContractError(f"GPU {g.index} does not exist ({topology.size} GPUs)")
        h = staged.get(g.index, Holding())
        if claim in h.claims:
            raise DRAContractError(f"claim {claim} already holds GPU {g.index}")
        if h.kind is not None and (h.kind is not g.kind or g.kind is DeviceKind.GPU):
            what = "be held whole again" if g.kind is h.kind else f"also be a {g.kind.value}"
            raise DRAContractError(
                f"GPU {g.index} is in use as {h.kind.value} ({', '.join(h.claims)}); it cannot "
                f"{what}")
        total = topology.gpus[g.index].memory_mib
        if g.kind is DeviceKind.GPU:
            h = replace(h, whole=True)
        elif g.kind is DeviceKind.SHARE:
            h = replace(h, core_percent=h.core_percent + g.core_percent,
                        memory_mib=h.memory_mib + g.memory_mib, shares=h.shares + 1)
            if h.core_percent > FULL_CORE:
                raise DRAContractError(f"GPU {g.index}: shares would take {h.core_percent} % "
                                       "of its compute")
        else:
            h = replace(h, memory_mib=h.memory_mib + g.memory_mib, slots=h.slots + 1)
            if h.slots > slots:
                raise DRAContractError(f"GPU {g.index}: more than {slots} co-location slots")
        if g.kind is not DeviceKind.GPU and total > 0 and h.memory_mib > total:
            raise DRAContractError(f"GPU {g.index}: {h.memory_mib} MiB reserved of {total}")
        staged[g.index] = replace(h, claims=h.claims + (claim,))
    holdings.clear()
    holdings.update(staged)


def remove_allocation(holdings: dict[int, Holding], claim: str, alloc: ClaimAllocation) -> None:
    """Take ``claim``'s GPUs out of ``holdings`` again (the inverse of
    :func:`add_allocation`; GPUs it does not hold are left alone)."""
    for g in alloc.grants:
        h = holdings.get(g.index)
        if h is None or claim not in h.claims:
            continue
        claims = tuple(c for c in h.claims if c != claim)
        if g.kind is DeviceKind.GPU:
            h = replace(h, whole=False)
        elif g.kind is DeviceKind.SHARE:
            h = replace(h, core_percent=h.core_percent - g.core_percent,
                        memory_mib=h.memory_mib - g.memory_mib, shares=h.shares - 1)
        else:
            h = replace(h, memory_mib=h.memory_mib - g.memory_mib, slots=h.slots - 1)
        h = replace(h, claims=claims)
        if h.kind is None and not claims:
            holdings.pop(g.index, None)
        else:
            holdings[g.index] = h


def node_state(
    holdings: Mapping[int, Holding], *, unhealthy: frozenset[int] = frozenset(),
    slots: int = DEFAULT_SLOTS, residents: Mapping[int, Sequence[Resident]] | None = None,
) -> NodeState:
    """The :class:`~topology.policies.base.NodeState` the placement policies take, from the
    holdings of a node's allocated claims: whole GPUs held entirely, shares as summed vGPU
    core/memory (:func:`topology.policies.base.add_grant`, the device plugin path's rule).

    Args:
        holdings: GPU index → what the node's claims hold (:func:`add_allocation`).
        unhealthy: GPUs that must not be handed out.
        slots: co-location slots per GPU.
        residents: GPU index → the co-located jobs on it (their profiles are the allocator's
            knowledge, not the slice's); required for every GPU holding slots.

    Raises:
        DRAContractError: a GPU holds slots but ``residents`` does not say who.
    """
    usage: dict[int, GPUUsage] = {}
    for i, h in holdings.items():
        if h.whole:
            add_grant(usage, [i], fractional=False)
        elif h.shares:
            add_grant(usage, [i], fractional=True, core_percent=h.core_percent,
                      memory_mib=h.memory_mib)
        elif h.slots:
            jobs = (residents or {}).get(i)
            if not jobs:
                raise DRAContractError(f"GPU {i} holds {h.slots} co-location slots; give its "
                                       "residents")
            usage[i] = GPUUsage(residents=tuple(jobs))
    return NodeState(usage, unhealthy, slots)
