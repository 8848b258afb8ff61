"""The kubelet's NUMA alignment of a container, modelled: which NUMA node(s) its Topology Manager
picks, whether it admits the pod, and which devices its device manager then offers the device
plugin (Kubernetes 1.36.3). Pure: plain numbers in, plain numbers out.

Why gputopo needs it: with ``topologyManagerPolicy`` other than ``none`` the kubelet, not the
scheduler, decides on which NUMA nodes a container's devices must lie. It computes that mask
from the devices that are *free* (and, for a Guaranteed container with whole CPUs under the
static CPU manager, from the free CPUs), and then offers the device plugin's
``GetPreferredAllocation`` only the free devices on that mask. gputopo's plugin gives a pod
only the GPUs the extender chose, so the extender must choose them on the mask the kubelet
will pick, and must not place a pod where ``restricted`` / ``single-numa-node`` will reject it.

Sources read (``k8s.io/kubernetes@v1.36.3``, module cache):

* ``pkg/kubelet/cm/devicemanager/topology_hints.go``: ``GetTopologyHints`` /
  ``GetPodTopologyHints`` (no hints for a resource without topology, an empty list when fewer
  devices are available than requested), ``generateDeviceTopologyHints`` (every mask over the
  NUMA nodes that carry devices of the resource, ``deviceNUMANodes``, with enough available
  devices; preferred = as few NUMA nodes as any mask holding the request among *all* devices).
* ``pkg/kubelet/cm/cpumanager/policy_static.go``: ``GetTopologyHints``, ``guaranteedCPUs``,
  ``podGuaranteedCPUs``, ``generateCPUTopologyHints`` (the same shape over the CPUs' NUMA
  nodes; a container that is not Guaranteed or asks fractional CPUs has no preference).
* ``pkg/kubelet/cm/topologymanager/policy.go``: ``filterProvidersHints``,
  ``mergePermutation`` (AND of the masks; preferred only if every hint is preferred *and* all
  masks are equal), ``narrowestHint``, ``maxOfMinAffinityCounts``, ``HintMerger.compare`` and
  ``Merge``; ``policy_best_effort.go`` (always admits), ``policy_restricted.go`` (admits a
  preferred hint), ``policy_single_numa_node.go`` (``filterSingleNumaHints`` first; the
  machine-wide mask becomes nil), ``policy_none.go``; ``numa_info.go`` (``Narrowest``,
  ``Closest``, ``DefaultAffinityMask``); ``bitmask/bitmask.go`` (``IsNarrowerThan``: fewer
  bits, then the lower number; ``IterateBitMasks``).
* ``pkg/kubelet/cm/devicemanager/manager.go``: ``devicesToAllocate`` and ``filterByAffinity``
  (which devices ``GetPreferredAllocation`` is offered, and when the kubelet takes devices
  without asking).

Masks are ints, bit *n* = NUMA node *n* (the kubelet's ``bitmask.BitMask`` is a ``uint64``).
The :func:`merge` here enumerates the distinct merged hints instead of every permutation
(same result: ``compare`` ranks hints by a fixed order, so the order of the permutations does
not matter); ``tests/topology/test_numa_alignment_kubelet.py`` runs the real Go code on random
cases to hold it to that.

The second half (:func:`align`) applies the model to a gputopo node: the kubelet's device view
of a :class:`~topology.policies.base.NodeState` (whole GPUs, vGPU-core and vGPU-memory units
are *separate resources* to the kubelet), and the GPUs the extender may choose so that the
kubelet offers exactly them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from topology.contract import (
    LABEL_CPU_MANAGER_POLICY,
    LABEL_TOPOLOGY_MANAGER_POLICY,
    LABEL_TOPOLOGY_MANAGER_PREFER_CLOSEST,
    LABEL_TOPOLOGY_MANAGER_SCOPE,
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.model import Topology
from topology.policies.base import FULL_CORE, NodeState, Request

#: ``topologyManagerPolicy`` values (KubeletConfiguration).
POLICY_NONE = "none"
POLICY_BEST_EFFORT = "best-effort"
POLICY_RESTRICTED = "restricted"
POLICY_SINGLE_NUMA_NODE = "single-numa-node"
TOPOLOGY_MANAGER_POLICIES = (POLICY_NONE, POLICY_BEST_EFFORT, POLICY_RESTRICTED,
                             POLICY_SINGLE_NUMA_NODE)
#: ``topologyManagerScope`` values.
SCOPE_CONTAINER = "container"
SCOPE_POD = "pod"
TOPOLOGY_MANAGER_SCOPES = (SCOPE_CONTAINER, SCOPE_POD)
#: ``cpuManagerPolicy`` values.
CPU_MANAGER_POLICIES = ("none", "static")


class KubeletConfigError(ValueError):
    """A kubelet setting is not one the 1.36 kubelet accepts; one line."""


# ------------------------------------------------------------------------------ bit masks
def mask_of(nodes: Iterable[int]) -> int:
    """The bit mask of NUMA node IDs (``bitmask.NewBitMask``)."""
    m = 0
    for n in nodes:
        m |= 1 << n
    return m


def bits(mask: int) -> tuple[int, ...]:
    """The NUMA node IDs set in ``mask``, ascending (``GetBits``)."""
    return tuple(i for i in range(mask.bit_length()) if mask >> i & 1)


def count(mask: int) -> int:
    """Number of NUMA nodes in ``mask`` (``Count``)."""
    return mask.bit_count()


def narrower(a: int, b: int) -> bool:
    """``a.IsNarrowerThan(b)``: fewer NUMA nodes, or as many and a lower number."""
    ca, cb = count(a), count(b)
    return a < b if ca == cb else ca < cb


def masks_over(nodes: Sequence[int]) -> list[int]:
    """Every non-empty mask over ``nodes`` in ``IterateBitMasks`` order: by size, then the
    combinations of the sorted IDs in lexicographic order."""
    ids = sorted(set(nodes))
    return [mask_of(c) for k in range(1, len(ids) + 1) for c in itertools.combinations(ids, k)]


def format_mask(mask: int | None) -> str:
    """``{0,1}``-style text of a mask for messages (``any`` for None)."""
    if mask is None:
        return "any"
    return "{" + ",".join(str(n) for n in bits(mask)) + "}"


# ------------------------------------------------------------------------------ hints
@dataclass(frozen=True)
class Hint:
    """A ``TopologyHint``.

    Attributes:
        mask: ``NUMANodeAffinity`` as a bit mask, None = nil (no preference).
        preferred: ``Preferred``.
    """

    mask: int | None
    preferred: bool

    def __str__(self) -> str:
        return f"{format_mask(self.mask)}{'' if self.preferred else ' (not preferred)'}"


#: One provider's hints as the Topology Manager receives them: resource → hints, where None is
#: "no preference" (nil) and an empty list "no possible affinity".
ProviderHints = Mapping[str, Sequence[Hint] | None]


def generate_hints(
    total: Mapping[int, int], available: Mapping[int, int], request: int,
) -> list[Hint]:
    """``generateDeviceTopologyHints`` (and ``generateCPUTopologyHints``, the same shape) for
    items that each sit on exactly one NUMA node, as gputopo's devices and Linux CPUs do.

    Args:
        total: NUMA node → items on it, healthy or not (``allDevices``; CPUs in
            ``CPUDetails``). The masks iterated are those over these nodes
            (``deviceNUMANodes``).
        available: NUMA node → free items (healthy and not allocated; free CPUs).
        request: items asked for (> 0).

    Returns:
        Every mask with at least ``request`` available items, in ``IterateBitMasks`` order;
        preferred when it has as few NUMA nodes as the narrowest mask holding ``request``
        among all items.
    """
    nodes = sorted(n for n, c in total.items() if c > 0) or sorted(total)
    min_size = len(nodes)
    hints: list[Hint] = []
    for m in masks_over(nodes):
        on = bits(m)
        if sum(total.get(n, 0) for n in on) >= request and count(m) < min_size:
            min_size = count(m)
        if sum(available.get(n, 0) for n in on) >= request:
            hints.append(Hint(m, False))
    return [Hint(h.mask, h.mask is not None and count(h.mask) == min_size) for h in hints]


def device_hints(
    total: Mapping[int | None, int], available: Mapping[int | None, int], request: int,
) -> list[Hint] | None:
    """The device manager's hints for one resource of one container (``GetTopologyHints``,
    nothing allocated to it yet).

    Args:
        total: NUMA node → devices of the resource (None = devices without ``TopologyInfo``).
        available: NUMA node → free devices (healthy, not allocated by the kubelet).
        request: devices requested.

    Returns:
        None when no device carries a NUMA node (``deviceHasTopologyAlignment`` false: no
        preference); ``[]`` when fewer devices are free than requested; else
        :func:`generate_hints` over the devices with a NUMA node.
    """
    aligned = {n: c for n, c in total.items() if n is not None and c > 0}
    if not aligned:
        return None
    if sum(available.values()) < request:
        return []
    free = {n: c for n, c in available.items() if n is not None}
    return generate_hints(aligned, free, request)


def _filter_providers(providers: Sequence[ProviderHints]) -> list[list[Hint]]:
    """``filterProvidersHints``: one hint list per resource; nil → ``[{nil, true}]``, empty →
    ``[{nil, false}]``, a provider with no resources → ``[{nil, true}]``."""
    out: list[list[Hint]] = []
    for hints in providers:
        if not hints:
            out.append([Hint(None, True)])
            continue
        for resource in hints:
            h = hints[resource]
            if h is None:
                out.append([Hint(None, True)])
            elif len(h) == 0:
                out.append([Hint(None, False)])
            else:
                out.append(list(h))
    return out


def _filter_single_numa(lists: Sequence[Sequence[Hint]]) -> list[list[Hint]]:
    """``filterSingleNumaHints``: keep preferred hints that are nil or name one NUMA node."""
    return [[h for h in hs if h.preferred and (h.mask is None or count(h.mask) == 1)]
            for hs in lists]


def _max_of_min_counts(lists: Sequence[Sequence[Hint]]) -> int:
    """``maxOfMinAffinityCounts``: the largest, over resources, of the narrowest non-nil
    hint's NUMA-node count."""
    best = 0
    for hs in lists:
        counts = [count(h.mask) for h in hs if h.mask is not None]
        if counts:
            best = max(best, min(counts))
    return best


_MIXED = -1


def _merged_hints(lists: Sequence[Sequence[Hint]], default: int) -> set[Hint]:
    """The distinct results of ``mergePermutation`` over every permutation (one hint per
    resource): AND of the non-nil masks with the machine mask; preferred when every hint is
    preferred and all non-nil masks are equal. Computed resource by resource on the distinct
    partial results (at most 2·2^n of them), not on the product of the lists."""
    # state: (AND so far, preferred so far, the common mask: None before the first non-nil
    # mask, _MIXED once two differ or anything is not preferred)
    states: set[tuple[int, bool, int | None]] = {(default, True, None)}
    for hs in lists:
        nxt: set[tuple[int, bool, int | None]] = set()
        for acc, pref, common in states:
            for h in hs:
                if h.mask is None:
                    a, c = acc, common
                else:
                    a = acc & h.mask
                    c = h.mask if common is None or common == h.mask else _MIXED
                p = pref and h.preferred and c != _MIXED
                nxt.add((a, p, c if p else _MIXED))
        states = nxt
    return {Hint(a, p) for a, p, _ in states}


Distances = Mapping[int, Sequence[int]]


def _fitter(current: Hint, candidate: Hint, prefer_closest: bool,
            distances: Distances | None) -> Hint:
    """``CompareNUMAAffinityMasks``: the current hint on equal masks, else the narrower
    (``Narrowest``) or, with ``prefer-closest-numa-nodes``, ``Closest``."""
    assert current.mask is not None and candidate.mask is not None
    if candidate.mask == current.mask:
        return current
    if prefer_closest:
        best = _closest(current.mask, candidate.mask, distances)
    else:
        best = current.mask if narrower(current.mask, candidate.mask) else candidate.mask
    return current if best == current.mask else candidate


def _average_distance(mask: int, distances: Distances) -> float:
    """``CalculateAverageFor``."""
    nodes = bits(mask)
    if not nodes:
        return 0.0
    total = sum(float(distances[a][b]) for a in nodes for b in nodes)
    return total / (len(nodes) * len(nodes))


def _closest(m1: int, m2: int, distances: Distances | None) -> int:
    """``NUMAInfo.Closest``: the narrower of masks of different size; of equal size the one
    with the shorter average distance, then the lower number.

    Raises:
        KubeletConfigError: two masks of equal size over more than one NUMA node need
            distances and none are known.
    """
    if count(m1) != count(m2):
        return m1 if narrower(m1, m2) else m2
    if distances is None:
        if count(m1) == 1:  # CalculateAverageFor of one node is its self-distance
            return m1 if m1 < m2 else m2
        raise KubeletConfigError(
            "prefer-closest-numa-nodes compares masks by NUMA distance, which is unknown here")
    d1, d2 = _average_distance(m1, distances), _average_distance(m2, distances)
    if d1 == d2:
        return m1 if m1 < m2 else m2
    return m1 if d1 < d2 else m2


def _compare(current: Hint | None, candidate: Hint, best_count: int, prefer_closest: bool,
             distances: Distances | None) -> Hint | None:
    """``HintMerger.compare``, case by case as in policy.go."""
    assert candidate.mask is not None
    if count(candidate.mask) == 0:
        return current
    if current is None:
        return candidate
    assert current.mask is not None
    if not current.preferred and candidate.preferred:
        return candidate
    if current.preferred and not candidate.preferred:
        return current
    if current.preferred and candidate.preferred:
        return _fitter(current, candidate, prefer_closest, distances)
    cur, cand = count(current.mask), count(candidate.mask)
    if cur > best_count:  # case 1
        return _fitter(current, candidate, prefer_closest, distances)
    if cur == best_count:  # case 2
        if cand != best_count:
            return current
        return _fitter(current, candidate, prefer_closest, distances)
    if cand > best_count:  # case 3a
        return current
    if cand == best_count:  # case 3b
        return candidate
    if cand > cur:  # case 3ca
        return candidate
    if cand < cur:  # case 3cb
        return current
    return _fitter(current, candidate, prefer_closest, distances)  # case 3cc


@dataclass(frozen=True)
class MergeResult:
    """The Topology Manager's answer for one container (or pod).

    Attributes:
        hint: the best hint (``mask`` None = nil: the device manager then aligns nothing).
        admit: whether the policy admits it (``canAdmitPodResult``).
    """

    hint: Hint
    admit: bool


def merge(
    policy: str, machine_nodes: Collection[int], providers: Sequence[ProviderHints], *,
    prefer_closest: bool = False, distances: Distances | None = None,
) -> MergeResult:
    """``Policy.Merge`` of ``policy`` over the hint providers' answers.

    Args:
        policy: a ``topologyManagerPolicy``.
        machine_nodes: the machine's NUMA node IDs (``NUMAInfo.Nodes``; the default mask).
        providers: each hint provider's hints (device manager, CPU manager, ...).
        prefer_closest: the ``prefer-closest-numa-nodes`` policy option (ignored by
            ``single-numa-node``, as in ``NewHintMerger``).
        distances: NUMA distances for that option.

    Returns:
        The best hint and whether the policy admits it; ``none`` returns a nil hint and admits.

    Raises:
        KubeletConfigError: unknown policy, or ``prefer_closest`` needs distances it lacks.
    """
    if policy not in TOPOLOGY_MANAGER_POLICIES:
        raise KubeletConfigError(f"unknown topologyManagerPolicy {policy!r}")
    if policy == POLICY_NONE:
        return MergeResult(Hint(None, False), True)
    default = mask_of(machine_nodes)
    lists = _filter_providers(providers)
    single = policy == POLICY_SINGLE_NUMA_NODE
    if single:
        lists = _filter_single_numa(lists)
    key = tuple(tuple((h.mask, h.preferred) for h in hs) for hs in lists)
    closest = prefer_closest and not single
    dist_key = (tuple(sorted((n, tuple(d)) for n, d in distances.items()))
                if closest and distances is not None else None)
    mask, preferred = _merge_cached(key, default, closest, dist_key)
    hint = Hint(mask, preferred)
    if single and hint.mask == default:
        hint = Hint(None, hint.preferred)
    admit = True if policy == POLICY_BEST_EFFORT else hint.preferred
    return MergeResult(hint, admit)


@lru_cache(maxsize=65_536)
def _merge_cached(
    lists: tuple[tuple[tuple[int | None, bool], ...], ...], default: int, closest: bool,
    dist_key: tuple[tuple[int, tuple[int, ...]], ...] | None,
) -> tuple[int, bool]:
    """``HintMerger.Merge`` (memoised: a pure function of its hashable arguments)."""
    hint_lists = [[Hint(m, p) for m, p in hs] for hs in lists]
    distances = {n: d for n, d in dist_key} if dist_key is not None else None
    best_count = _max_of_min_counts(hint_lists)
    best: Hint | None = None
    # a fixed order (the result does not depend on it; see the module docstring)
    for cand in sorted(_merged_hints(hint_lists, default),
                       key=lambda h: (h.mask or 0, h.preferred)):
        best = _compare(best, cand, best_count, closest, distances)
    if best is None:
        best = Hint(default, False)
    assert best.mask is not None
    return best.mask, best.preferred


# ------------------------------------------------------------------------------ allocation
def devices_to_allocate(
    mask: int | None, available: Mapping[str, int | None], needed: int,
    preferred: Callable[[frozenset[str], frozenset[str], int], Collection[str]],
) -> frozenset[str]:
    """``devicesToAllocate`` for a container with nothing allocated yet: the devices the
    kubelet hands to ``Allocate``.

    Args:
        mask: the container's merged affinity (None = nil or ``none`` policy: no alignment).
        available: free device ID → its NUMA node (None = no ``TopologyInfo``).
        needed: devices requested.
        preferred: the plugin's ``GetPreferredAllocation(available, must_include, size)``;
            it may raise to refuse (the kubelet then fails the pod).

    Returns:
        The allocated devices.

    Raises:
        ValueError: fewer devices are free than needed.
    """
    if len(available) < needed:
        raise ValueError(f"requested {needed} devices, {len(available)} available")
    if mask is None:
        aligned: frozenset[str] = frozenset()
    else:
        aligned = frozenset(d for d, n in available.items() if n is not None and mask >> n & 1)
    allocated: list[str] = []

    def take(devices: Iterable[str]) -> bool:
        for d in sorted(set(devices) - set(allocated)):
            allocated.append(d)
            if len(allocated) == needed:
                return True
        return False

    if needed < len(aligned):
        chosen = preferred(aligned, frozenset(), needed)
        if take(set(chosen) & aligned) or take(aligned):
            return frozenset(allocated)
        raise ValueError("unexpectedly allocated fewer devices than required")
    if take(aligned):
        return frozenset(allocated)
    chosen = preferred(frozenset(available), frozenset(allocated), needed)
    if take(set(chosen) & set(available)):
        return frozenset(allocated)
    rest = [d for d in available if d not in aligned]
    if take(d for d in rest if available[d] is not None) or take(rest):
        return frozenset(allocated)
    raise ValueError("unexpectedly allocated fewer devices than required")


# ------------------------------------------------------------------------------ gputopo nodes
@dataclass(frozen=True)
class KubeletConfig:
    """The kubelet settings that decide NUMA alignment on one node (what the device plugin
    publishes on its Node: :func:`topology.contract.kubelet_config_labels`).

    Attributes:
        topology_manager_policy: ``none`` (the kubelet's default), ``best-effort``,
            ``restricted`` or ``single-numa-node``.
        topology_manager_scope: ``container`` (default) or ``pod``.
        cpu_manager_policy: ``none`` (default) or ``static`` (exclusive CPUs for Guaranteed
            containers with whole CPUs: a second hint provider).
        prefer_closest_numa: the ``prefer-closest-numa-nodes`` Topology Manager option.

    Raises:
        KubeletConfigError: a value the 1.36 kubelet does not accept.
    """

    topology_manager_policy: str = POLICY_NONE
    topology_manager_scope: str = SCOPE_CONTAINER
    cpu_manager_policy: str = "none"
    prefer_closest_numa: bool = False

    def __post_init__(self) -> None:
        if self.topology_manager_policy not in TOPOLOGY_MANAGER_POLICIES:
            raise KubeletConfigError(
                f"topologyManagerPolicy {self.topology_manager_policy!r} is not one of "
                + ", ".join(TOPOLOGY_MANAGER_POLICIES))
        if self.topology_manager_scope not in TOPOLOGY_MANAGER_SCOPES:
            raise KubeletConfigError(
                f"topologyManagerScope {self.topology_manager_scope!r} is not one of "
                + ", ".join(TOPOLOGY_MANAGER_SCOPES))
        if self.cpu_manager_policy not in CPU_MANAGER_POLICIES:
            raise KubeletConfigError(
                f"cpuManagerPolicy {self.cpu_manager_policy!r} is not one of "
                + ", ".join(CPU_MANAGER_POLICIES))

    @property
    def aligning(self) -> bool:
        """The Topology Manager aligns (any policy but ``none``)."""
        return self.topology_manager_policy != POLICY_NONE

    def describe(self) -> str:
        """``topologyManagerPolicy=…, scope …`` for messages."""
        return (f"topologyManagerPolicy {self.topology_manager_policy}, scope "
                f"{self.topology_manager_scope}, cpuManagerPolicy {self.cpu_manager_policy}")


@dataclass(frozen=True)
class PodDemand:
    """What the kubelet's hint providers read from the pod, besides the gputopo request.

    Attributes:
        container_cpus: exclusive CPUs the static CPU manager gives the container that asks
            gputopo devices (``guaranteedCPUs``: the pod is Guaranteed and the container's CPU
            request is whole; else 0).
        pod_cpus: the same for the whole pod (``podGuaranteedCPUs``; the pod scope).
        device_containers: containers (init and app) that ask gputopo devices.
        memory_units: ``gputopo.io/vgpu-memory`` devices the pod asks (read for a
            co-location slot, whose request carries the memory it reserves, asked or taken
            from its profile: only asked units are devices to the kubelet).
    """

    container_cpus: int = 0
    pod_cpus: int = 0
    device_containers: int = 1
    memory_units: int = 0

    def cpus(self, scope: str) -> int:
        """Guaranteed CPUs the CPU manager aligns for ``scope``."""
        return self.pod_cpus if scope == SCOPE_POD else self.container_cpus

    def key(self) -> tuple[int, int, int, int]:
        """Hashable form."""
        return (self.container_cpus, self.pod_cpus, self.device_containers, self.memory_units)


@dataclass(frozen=True)
class UnitView:
    """One unit resource (vGPU-core or vGPU-memory) as the kubelet counts it, per GPU.

    Attributes:
        resource: the resource name.
        total: GPU index → devices (healthy or not).
        free: GPU index → devices the kubelet has not allocated, on healthy GPUs.
    """

    resource: str
    total: Mapping[int, int]
    free: Mapping[int, int]


def whole_held(state: NodeState, gpu: int) -> bool:
    """The GPU is held whole: its ``nvidia.com/gpu`` device is allocated by the kubelet.
    (vGPU shares of core only that add up to exactly 100 % leave the same usage in the node
    state; the extender counts such a GPU as held whole — see docs/cpu-pinning.md.)"""
    u = state.used(gpu)
    return u.core_percent >= FULL_CORE and u.memory_mib == 0 and not u.residents


def kubelet_free_gpus(topology: Topology, state: NodeState) -> frozenset[int]:
    """GPUs whose ``nvidia.com/gpu`` device the kubelet counts free: healthy and not held
    whole. A GPU carrying vGPU shares (or co-located jobs) is free to the kubelet's
    ``nvidia.com/gpu`` accounting: shares are other resources there."""
    return frozenset(g.index for g in topology.gpus
                     if g.index not in state.unhealthy and not whole_held(state, g.index))


def unit_views(topology: Topology, state: NodeState, unit_mib: int) -> dict[str, UnitView]:
    """The kubelet's counts of ``gputopo.io/vgpu-core``, ``gputopo.io/vgpu-memory`` and
    ``gputopo.io/gpu-shared`` devices per GPU (100 core devices per GPU; ``memory //
    unit_mib`` memory devices; ``state.slots_per_gpu`` slot devices). Allocated = what the
    vGPU shares and co-located jobs on the GPU hold (the plugin proposes units on the pod's
    GPU; a co-located job's memory counts as ``gputopo.io/vgpu-memory`` devices, as when the
    pod asked for it, which is how a slot reserves memory); a GPU held whole keeps all its
    units and slots free to the kubelet, a GPU with shares its slots; an unhealthy GPU has
    none free."""
    views: dict[str, tuple[dict[int, int], dict[int, int]]] = {
        r: ({}, {}) for r in (RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY, RESOURCE_GPU_SHARED)}
    for g in topology.gpus:
        i = g.index
        units = max(0, g.memory_mib // unit_mib)
        totals = {RESOURCE_VGPU_CORE: FULL_CORE, RESOURCE_VGPU_MEMORY: units,
                  RESOURCE_GPU_SHARED: state.slots_per_gpu}
        for r, n in totals.items():
            views[r][0][i] = n
        if i in state.unhealthy:
            for r in totals:
                views[r][1][i] = 0
            continue
        u = state.used(i)
        if whole_held(state, i):
            for r, n in totals.items():
                views[r][1][i] = n
            continue
        held = (u.memory_mib + u.resident_memory_mib) // unit_mib if unit_mib > 0 else 0
        views[RESOURCE_VGPU_CORE][1][i] = max(0, FULL_CORE - u.core_percent)
        views[RESOURCE_VGPU_MEMORY][1][i] = max(0, units - held)
        views[RESOURCE_GPU_SHARED][1][i] = max(0, state.slots_per_gpu - len(u.residents))
    return {r: UnitView(r, total, free) for r, (total, free) in views.items()}


def _per_numa(topology: Topology, per_gpu: Mapping[int, int]) -> dict[int | None, int]:
    out: dict[int | None, int] = {}
    for g in topology.gpus:
        c = per_gpu.get(g.index, 0)
        if c:
            out[g.numa_node] = out.get(g.numa_node, 0) + c
    return out


def cpus_per_numa(topology: Topology) -> dict[int, int]:
    """CPUs of each NUMA node that carries GPUs (the GPUs' ``cpu_affinity``; 0 = unknown)."""
    cpus: dict[int, set[int]] = {}
    for g in topology.gpus:
        if g.numa_node is not None:
            cpus.setdefault(g.numa_node, set()).update(g.cpu_affinity)
    return {n: len(c) for n, c in cpus.items()}


def gpu_numa_nodes(topology: Topology) -> tuple[int, ...]:
    """The NUMA nodes that carry GPUs, ascending."""
    return tuple(sorted({g.numa_node for g in topology.gpus if g.numa_node is not None}))


def cpu_hints(topology: Topology, cpus: int) -> list[Hint] | None:
    """The static CPU manager's hints for ``cpus`` exclusive CPUs, assuming every NUMA node
    has that many free: the extender cannot see the CPU manager's state. Over the NUMA nodes
    that carry GPUs (what the topology knows); None when ``cpus`` is 0 (no preference)."""
    if cpus <= 0:
        return None
    per = cpus_per_numa(topology)
    if not per:
        return None
    total = {n: (c if c > 0 else cpus) for n, c in per.items()}
    return generate_hints(total, total, cpus)


@dataclass(frozen=True)
class Alignment:
    """The kubelet's verdict on one pod for one node state, and what it means for the
    extender.

    Attributes:
        config: the node's kubelet settings.
        hint: the Topology Manager's best hint (mask None: no alignment).
        admitted: the policy admits the pod.
        eligible: GPUs the extender may choose (the kubelet offers them); all GPUs of the node
            when the Topology Manager does not align.
        must_include: GPUs the kubelet allocates whatever the plugin prefers (a mask holding
            fewer free devices than asked, ``best-effort`` only): the decision must hold them.
        reason: why the pod cannot go here ("" when it can).
        unresolvable: no eviction can change that (the pod's shape, the node's settings).
    """

    config: KubeletConfig
    hint: Hint
    admitted: bool
    eligible: frozenset[int]
    must_include: frozenset[int] = frozenset()
    reason: str = ""
    unresolvable: bool = False
    detail: tuple[str, ...] = field(default=(), compare=False)

    @property
    def fits(self) -> bool:
        """The kubelet admits the pod and offers GPUs to choose from."""
        return self.admitted and not self.reason

    def restrict(self, state: NodeState, topology: Topology) -> NodeState:
        """``state`` as a policy should see it: every GPU the kubelet would not hand over
        (outside :attr:`eligible`) marked unavailable, as an unhealthy GPU is, so the
        policy's choice lies on the kubelet's mask. Returns ``state`` itself when nothing is
        taken out. (The policy's PreservedBW then counts only the GPUs left on the mask.)"""
        unusable = frozenset(range(topology.size)) - self.eligible - state.unhealthy
        if not unusable:
            return state
        return replace(state, unhealthy=state.unhealthy | unusable)


#: Most completions :func:`complete_must_include` tries.
MAX_COMPLETIONS = 256


def complete_must_include(
    alignment: Alignment, state: NodeState, topology: Topology, count: int,
    place: Callable[[NodeState], Sequence[int] | None],
    effbw: Callable[[NodeState], float | None],
) -> frozenset[int] | None:
    """The GPUs to give a pod when the kubelet takes :attr:`Alignment.must_include` anyway
    (a ``best-effort`` mask narrower than the request) and the plugin adds the rest: the
    policy's own choice when it holds them, else the completion with the highest predicted
    EffBW (ties: the lowest GPU indices).

    Args:
        alignment: the kubelet's verdict (``must_include`` non-empty).
        state: the node's state.
        topology: the node.
        count: GPUs asked.
        place: the policy's choice on a state (None: no fit).
        effbw: the predicted EffBW (GB/s) of the policy's decision on a state where exactly
            one completion is free (None: no fit).

    Returns:
        The GPU set, or None when no completion fits (or there are more than
        :data:`MAX_COMPLETIONS`).
    """
    must = alignment.must_include
    free = frozenset(state.free_gpus(topology))
    chosen = place(state)
    if chosen is not None and must <= set(chosen):
        return frozenset(chosen)
    rest = sorted(free - must)
    need = count - len(must)
    if need < 0 or need > len(rest):
        return None
    combos = list(itertools.islice(itertools.combinations(rest, need), MAX_COMPLETIONS + 1))
    if len(combos) > MAX_COMPLETIONS:
        return None
    best: tuple[float, tuple[int, ...]] | None = None
    everyone = frozenset(range(topology.size))
    for extra in combos:
        gpus = must | frozenset(extra)
        only = replace(state, unhealthy=state.unhealthy | (everyone - gpus - state.unhealthy))
        bw = effbw(only)
        if bw is None:
            continue
        key = (-bw, tuple(sorted(gpus)))
        if best is None or key < (-best[0], best[1]):
            best = (bw, tuple(sorted(gpus)))
    return frozenset(best[1]) if best is not None else None


def _resources(request: Request, unit_mib: int,
               demand: PodDemand = PodDemand()) -> dict[str, int]:
    """The device resources (and counts) the kubelet allocates for ``request``."""
    out: dict[str, int] = {}
    if request.shared is not None:
        out[RESOURCE_GPU_SHARED] = 1
        if demand.memory_units > 0:
            out[RESOURCE_VGPU_MEMORY] = demand.memory_units
        return out
    if not request.fractional:
        return {RESOURCE_GPU: request.count}
    if request.core_percent > 0:
        out[RESOURCE_VGPU_CORE] = request.core_percent
    if request.memory_mib > 0:
        out[RESOURCE_VGPU_MEMORY] = -(-request.memory_mib // unit_mib)
    return out


def _numa_text(per_numa: Mapping[int | None, int]) -> str:
    return ", ".join(f"{'?' if n is None else n}: {c}" for n, c in
                     sorted(per_numa.items(), key=lambda kv: -1 if kv[0] is None else kv[0]))


def align(
    topology: Topology, state: NodeState, request: Request, config: KubeletConfig,
    demand: PodDemand = PodDemand(), *, unit_mib: int = 256,
) -> Alignment:
    """What the node's kubelet will do with ``request`` given the node's ``state``, and the
    GPUs the extender may choose so that the kubelet offers exactly them.

    Model: the device manager's hints for each gputopo resource the pod asks (from the
    kubelet's device view: :func:`kubelet_free_gpus`, :func:`unit_views`), the static CPU
    manager's hints for its Guaranteed CPUs (as if every NUMA node had enough free CPUs:
    :func:`cpu_hints`), merged by the node's policy (:func:`merge`); then, per resource, the
    devices ``devicesToAllocate`` offers from that mask (closed form of
    :func:`devices_to_allocate` with gputopo's plugin, which proposes exactly the pod's GPUs
    or units on its one GPU):

    * more free devices on the mask than needed: the plugin chooses among them, so the pod's
      GPUs must lie on the mask;
    * exactly as many: the kubelet takes them all without asking, so they must be the pod's;
    * fewer (a narrowed ``best-effort`` mask): the kubelet takes them all and the plugin adds
      the rest from anywhere.

    Args:
        topology: the node.
        state: its used GPUs (whole, shares, co-located jobs, unhealthy).
        request: whole GPUs or one vGPU share.
        config: the node's kubelet settings.
        demand: the pod's CPU and container facts (:class:`PodDemand`).
        unit_mib: MiB per ``gputopo.io/vgpu-memory`` device.

    Returns:
        The :class:`Alignment`; ``eligible`` is every GPU when ``config`` does not align.
    """
    everyone = frozenset(g.index for g in topology.gpus)
    if not config.aligning:
        return Alignment(config, Hint(None, False), True, everyone)
    scope = config.topology_manager_scope
    if scope == SCOPE_CONTAINER and demand.device_containers > 1:
        return Alignment(
            config, Hint(None, False), False, frozenset(),
            reason=(f"{demand.device_containers} containers ask for GPUs and the node's "
                    f"Topology Manager ({config.topology_manager_policy}) aligns each "
                    "container on its own (topologyManagerScope container), which gputopo "
                    "cannot predict; use one GPU container or topologyManagerScope pod"),
            unresolvable=True)
    wants = _resources(request, unit_mib, demand)
    nodes = gpu_numa_nodes(topology)
    free_gpus = kubelet_free_gpus(topology, state)
    units = unit_views(topology, state, unit_mib) if RESOURCE_GPU not in wants else {}
    device_provider: dict[str, list[Hint] | None] = {}
    per_resource: dict[str, tuple[dict[int | None, int], dict[int | None, int]]] = {}
    for res, n in wants.items():
        if res == RESOURCE_GPU:
            total = _per_numa(topology, dict.fromkeys(range(topology.size), 1))
            avail = _per_numa(topology, dict.fromkeys(free_gpus, 1))
        else:
            total = _per_numa(topology, units[res].total)
            avail = _per_numa(topology, units[res].free)
        per_resource[res] = (total, avail)
        device_provider[res] = device_hints(total, avail, n)
    providers: list[ProviderHints] = [device_provider]
    cpus = demand.cpus(scope) if config.cpu_manager_policy == "static" else 0
    providers.append({"cpu": cpu_hints(topology, cpus)} if cpus > 0 else {})
    try:
        result = merge(config.topology_manager_policy, nodes, providers,
                       prefer_closest=config.prefer_closest_numa)
    except KubeletConfigError as exc:
        return Alignment(config, Hint(None, False), False, frozenset(),
                         reason=f"cannot predict the node's Topology Manager: {exc}")
    hint = result.hint
    if config.prefer_closest_numa and hint.mask is not None and count(hint.mask) > 1 and \
            config.topology_manager_policy != POLICY_SINGLE_NUMA_NODE:
        return Alignment(config, hint, result.admit, frozenset(), reason=(
            f"the node's Topology Manager would align the pod on NUMA nodes "
            f"{format_mask(hint.mask)}, chosen by NUMA distance (prefer-closest-numa-nodes), "
            "which gputopo does not know"))
    if not result.admit:
        free_text = "; ".join(f"{r} free per NUMA node: {_numa_text(per_resource[r][1])}"
                              for r in wants)
        why = (f"no single NUMA node can hold it ({free_text})"
               if config.topology_manager_policy == POLICY_SINGLE_NUMA_NODE else
               f"its best NUMA alignment {format_mask(hint.mask)} is not preferred ({free_text}"
               + (f"; {cpus} exclusive CPUs" if cpus else "") + ")")
        return Alignment(config, hint, False, frozenset(), reason=(
            f"the node's kubelet would reject the pod (TopologyAffinityError, "
            f"topologyManagerPolicy {config.topology_manager_policy}): {why}"))
    mask = hint.mask
    if RESOURCE_GPU not in wants:
        return _share_alignment(topology, state, config, hint, wants, units,
                                shared=request.shared is not None)
    return _whole_alignment(topology, state, config, hint, request.count, free_gpus, mask)


def _on(topology: Topology, mask: int | None, gpu: int) -> bool:
    n = topology.gpus[gpu].numa_node
    return mask is None or (n is not None and bool(mask >> n & 1))


def _whole_alignment(
    topology: Topology, state: NodeState, config: KubeletConfig, hint: Hint, needed: int,
    kubelet_free: frozenset[int], mask: int | None,
) -> Alignment:
    free = frozenset(state.free_gpus(topology))
    if mask is None:
        return Alignment(config, hint, True, free)
    aligned = frozenset(g for g in kubelet_free if _on(topology, mask, g))
    busy = sorted(aligned - free)
    if needed < len(aligned):
        eligible = aligned & free
        if len(eligible) < needed:
            return Alignment(config, hint, True, eligible, reason=(
                f"the node's kubelet offers only GPUs on NUMA node(s) {format_mask(mask)}: "
                f"{len(aligned)} are free to it but {len(busy)} of them carry vGPU shares "
                f"(GPU {','.join(map(str, busy))}); {needed} whole GPUs asked"))
        return Alignment(config, hint, True, eligible)
    if busy:
        return Alignment(config, hint, True, frozenset(), reason=(
            f"the node's kubelet would hand the pod all its free GPUs on NUMA node(s) "
            f"{format_mask(mask)} ({','.join(map(str, sorted(aligned)))}), but GPU "
            f"{','.join(map(str, busy))} carries vGPU shares"))
    if needed == len(aligned):
        return Alignment(config, hint, True, aligned)
    return Alignment(config, hint, True, free, must_include=aligned)


def _share_alignment(
    topology: Topology, state: NodeState, config: KubeletConfig, hint: Hint,
    wants: Mapping[str, int], units: Mapping[str, UnitView], *, shared: bool = False,
) -> Alignment:
    """A vGPU share or a co-location slot: the GPUs whose units the kubelet would hand over
    (the one-GPU rules of :func:`align`, per unit resource)."""
    mask = hint.mask
    if shared:  # a slot goes to a GPU neither held whole nor split into vGPU shares
        eligible = {i for i in range(topology.size) if i not in state.unhealthy
                    and not state.used(i).core_percent and not state.used(i).memory_mib
                    and len(state.used(i).residents) < state.slots_per_gpu}
    else:
        eligible = {i for i in range(topology.size) if i not in state.unhealthy
                    and not state.used(i).residents and not whole_held(state, i)}
    why: list[str] = []
    for res, needed in wants.items():
        view = units[res]
        if mask is None:
            ok = {g for g in eligible if view.free.get(g, 0) >= needed}
        else:
            on_mask = {g: c for g, c in view.free.items() if c > 0 and _on(topology, mask, g)}
            aligned = sum(on_mask.values())
            if needed < aligned:
                ok = {g for g in eligible if g in on_mask and on_mask[g] >= needed}
            else:
                # the kubelet takes every free unit on the mask: they must all be on one GPU
                holders = set(on_mask)
                ok = {g for g in eligible if holders <= {g} and view.free.get(g, 0) >= needed}
                if not ok:
                    why.append(f"the kubelet would take all {aligned} free {res} devices on "
                               f"NUMA node(s) {format_mask(mask)}, spread over GPUs "
                               f"{','.join(map(str, sorted(holders)))}")
        eligible &= ok
    reason = ""
    if not eligible:
        what = "co-location slot" if shared else "vGPU share"
        reason = (f"the node's kubelet would offer the pod only devices on NUMA node(s) "
                  f"{format_mask(mask)}, and no GPU there can take its {what} ("
                  + ("; ".join(why) if why else "held whole, split otherwise or full")
                  + ")")
    return Alignment(config, hint, True, frozenset(eligible), reason=reason)


#: The kubelet's defaults (no alignment): what a node publishing nothing is taken to have.
KUBELET_DEFAULTS = KubeletConfig()


# ------------------------------------------------------------------------------ the contract
def kubelet_config_labels(config: KubeletConfig) -> dict[str, str]:
    """The Node labels the device plugin publishes for ``config``
    (:data:`topology.contract.KUBELET_CONFIG_LABELS`; the prefer-closest label is ``"false"``
    unless the option is on)."""
    return {
        LABEL_TOPOLOGY_MANAGER_POLICY: config.topology_manager_policy,
        LABEL_TOPOLOGY_MANAGER_SCOPE: config.topology_manager_scope,
        LABEL_CPU_MANAGER_POLICY: config.cpu_manager_policy,
        LABEL_TOPOLOGY_MANAGER_PREFER_CLOSEST: "true" if config.prefer_closest_numa else "false",
    }


def kubelet_config_from_labels(labels: Mapping[str, str] | None) -> KubeletConfig:
    """The kubelet settings a Node's labels publish; the kubelet's defaults (``none``,
    ``container``, ``none``) for labels that are absent (a node whose plugin publishes none).

    Raises:
        KubeletConfigError: a label holds a value the kubelet does not accept (named).
    """
    got = labels or {}

    def value(key: str, default: str) -> str:
        v = got.get(key)
        return v.strip() if isinstance(v, str) and v.strip() else default

    closest = value(LABEL_TOPOLOGY_MANAGER_PREFER_CLOSEST, "false").lower()
    if closest not in ("true", "false"):
        raise KubeletConfigError(
            f"label {LABEL_TOPOLOGY_MANAGER_PREFER_CLOSEST}={closest!r} is not true or false")
    try:
        return KubeletConfig(
            topology_manager_policy=value(LABEL_TOPOLOGY_MANAGER_POLICY, POLICY_NONE),
            topology_manager_scope=value(LABEL_TOPOLOGY_MANAGER_SCOPE, SCOPE_CONTAINER),
            cpu_manager_policy=value(LABEL_CPU_MANAGER_POLICY, "none"),
            prefer_closest_numa=closest == "true",
        )
    except KubeletConfigError as exc:
        raise KubeletConfigError(f"node label: {exc}") from None


# ------------------------------------------------------------------------------ admission
def kubelet_hands_over(
    topology: Topology, state: NodeState, request: Request, config: KubeletConfig,
    gpus: Sequence[int], demand: PodDemand = PodDemand(), *, unit_mib: int = 256,
) -> bool:
    """Would the kubelet (modelled) admit the pod and give its container exactly ``gpus``
    (whole GPUs) or units of ``gpus[0]`` only (a share)?

    An independent path to :func:`align`'s verdict, for checking placements: the merged hint
    from the same hint model, then :func:`devices_to_allocate` run device by device on the
    kubelet's view of ``state`` (:func:`kubelet_free_gpus`, :func:`unit_views`) with gputopo's
    ``GetPreferredAllocation`` (exactly the pod's GPUs, or units on its one GPU; the plugin
    refuses anything else, and so does its ``Allocate``).

    Args:
        topology: the node.
        state: its used GPUs before the pod.
        request: the pod's request.
        config: the node's kubelet settings.
        gpus: the placement to check.
        demand: the pod's CPU and container facts.
        unit_mib: MiB per ``gputopo.io/vgpu-memory`` device.
    """
    a = align(topology, state, request, config, demand, unit_mib=unit_mib)
    if not a.admitted:
        return False
    mask = a.hint.mask if config.aligning else None
    numa = {g.index: g.numa_node for g in topology.gpus}
    if not request.fractional and request.shared is None:
        want = [str(g) for g in gpus]
        available = {str(g): numa[g] for g in kubelet_free_gpus(topology, state)}

        def whole(avail: frozenset[str], must: frozenset[str], size: int) -> list[str]:
            if not must <= set(want):
                raise ValueError("the kubelet insists on another GPU")
            chosen = sorted(must) + [d for d in want if d in avail and d not in must]
            if len(chosen) < size:
                raise ValueError("the pod's GPUs are not offered")
            return chosen[:size]

        try:
            return devices_to_allocate(mask, available, request.count, whole) == set(want)
        except ValueError:
            return False
    views = unit_views(topology, state, unit_mib)
    mine = f"{gpus[0]}:"
    for res, needed in _resources(request, unit_mib, demand).items():
        available = {f"{g}:{u}": numa[g] for g, c in views[res].free.items() for u in range(c)}

        def units(avail: frozenset[str], must: frozenset[str], size: int) -> list[str]:
            if any(not d.startswith(mine) for d in must):
                raise ValueError("the kubelet insists on another GPU's units")
            chosen = sorted(must) + sorted(d for d in avail if d.startswith(mine)
                                           and d not in must)
            if len(chosen) < size:
                raise ValueError("too few units offered on the pod's GPU")
            return chosen[:size]

        try:
            got = devices_to_allocate(mask, available, needed, units)
        except ValueError:
            return False
        if not all(d.startswith(mine) for d in got):
            return False
    return True
