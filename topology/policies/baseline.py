"""Baseline: lowest free index — what the kubelet does with no topology knowledge."""

from __future__ import annotations

from topology.model import Topology
from topology.policies.base import Decision, NodeState, Request
from topology.policies.common import (
    MODEL_GPUTOPO,
    check_capacity,
    fractional_decision,
    shareable_gpus,
    whole_decision,
)
from topology.policies.memo import Memo
from topology.policies.registry import register


@register("baseline", "lowest free GPU indices (the kubelet's own choice)", free_set_only=True)
def baseline(topology: Topology, state: NodeState, request: Request, memo: Memo) -> Decision:
    """Take the ``count`` lowest-index free GPUs; a fractional request takes the lowest-index
    GPU with room. Pattern vertex i goes to the i-th chosen GPU.

    Raises:
        NoFit: not enough free GPUs / no GPU with room for the share.
    """
    if request.fractional:
        gpu = shareable_gpus(topology, state, request)[0]
        return fractional_decision("baseline", topology, state, request, gpu,
                                   reason="lowest-index GPU with room")
    free = check_capacity(topology, state, request)
    chosen = free[: request.count]
    return whole_decision("baseline", topology, state, request, chosen, MODEL_GPUTOPO,
                          reason="lowest free indices")
