"""What a DRA cluster without gputopo's allocator gives a GPU claim: kube-scheduler's own
structured-parameters allocator over one device per GPU (NVIDIA's DRA model), for the
side-by-side comparison of docs/dra.md.

The 1.36 allocator (``k8s.io/dynamic-resource-allocation@v0.36.3/structured/internal/
incubating/allocator_incubating.go``, ``Allocator.Allocate`` → ``allocateOne``) walks the
node's pools (sorted by ID), their slices (sorted by name) and each slice's devices in listed
order, and keeps "the first full solution" of a depth-first search that tries the
combinations in that order ("Without scoring, we stop and use the first solution"). A driver
publishing one device per GPU in index order (NVIDIA's ``gpu-0`` …, and gputopo's slices,
:func:`topology.dra.resource_slices`) therefore gets:

* ``dra-first-fit``: the ``count`` lowest-index free GPUs;
* ``dra-first-fit-pcieroot``: the same search under ``constraints: [{matchAttribute:
  resource.kubernetes.io/pcieRoot}]``: the lexicographically first ``count``-combination of
  free GPUs that share one PCIe root (:func:`topology.dra.pcie_roots`). A claim larger than
  the node's largest root can never satisfy it; a user writes the constraint only on claims
  that fit one root, so those claims are placed by plain first fit (the reason says so).

Shares take the lowest-index GPU with room (first fit over ``gpu-<i>-share`` devices).
"""

from __future__ import annotations

from itertools import combinations

from topology.dra import pcie_roots
from topology.model import Topology
from topology.policies.base import Decision, NodeState, NoFit, Request
from topology.policies.common import (
    MODEL_GPUTOPO,
    check_capacity,
    fractional_decision,
    shareable_gpus,
    whole_decision,
)
from topology.policies.memo import Memo
from topology.policies.registry import register


@register("dra-first-fit", "kube-scheduler's DRA allocator over one device per GPU: the first "
          "free GPUs in device order (NVIDIA's DRA model)", free_set_only=True)
def dra_first_fit(topology: Topology, state: NodeState, request: Request, memo: Memo) -> Decision:
    """The ``count`` lowest-index free GPUs (first fit in slice order; module docstring).

    Raises:
        NoFit: too few free GPUs, or no GPU with room for a share.
    """
    if request.fractional:
        gpu = shareable_gpus(topology, state, request)[0]
        return fractional_decision("dra-first-fit", topology, state, request, gpu,
                                   reason="first shareable GPU in device order")
    free = check_capacity(topology, state, request)
    return whole_decision("dra-first-fit", topology, state, request, free[: request.count],
                          MODEL_GPUTOPO, reason="first fit in device order (no scoring)")


@register("dra-first-fit-pcieroot", "kube-scheduler's DRA allocator with matchAttribute "
          "resource.kubernetes.io/pcieRoot: the first free GPUs sharing one PCIe root",
          free_set_only=True)
def dra_first_fit_pcieroot(topology: Topology, state: NodeState, request: Request,
                           memo: Memo) -> Decision:
    """The lexicographically first free ``count``-set on one PCIe root; claims larger than
    the largest root: plain first fit (module docstring).

    Raises:
        NoFit: too few free GPUs, or no free set on one root.
    """
    if request.fractional:
        return dra_first_fit(topology, state, request, memo)
    free = check_capacity(topology, state, request)
    roots = pcie_roots(topology)
    sizes: dict[str, int] = {}
    for r in roots.values():
        sizes[r] = sizes.get(r, 0) + 1
    if request.count > max(sizes.values(), default=0):
        return whole_decision("dra-first-fit-pcieroot", topology, state, request,
                              free[: request.count], MODEL_GPUTOPO,
                              reason=f"{request.count} GPUs exceed a PCIe root "
                              f"({max(sizes.values(), default=0)} GPUs): no constraint, "
                              "first fit")
    for combo in combinations(free, request.count):
        if len({roots.get(g) for g in combo}) == 1 and combo[0] in roots:
            return whole_decision("dra-first-fit-pcieroot", topology, state, request, combo,
                                  MODEL_GPUTOPO, reason="first fit with matchAttribute pcieRoot")
    raise NoFit(f"no {request.count} free GPUs share a PCIe root (matchAttribute "
                "resource.kubernetes.io/pcieRoot)")
