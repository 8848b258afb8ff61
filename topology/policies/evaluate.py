"""Run a policy with a per-topology-class cache: the one entry point for the extender, the CLI
and the simulator.

Placement depends only on the topology *class* (link matrix, GPU models, bandwidth table),
the free state and the request, never on UUIDs or CPU numbers. So a decision computed for one
node is valid for every node of the same class in the same state: it is cached by
``(policy, class, state, request)`` and re-labelled with the asking node's UUIDs and CPUs.
Filter, prioritize and bind for one pod — and the next pods, on the nodes that did not change —
hit the cache. For policies registered with ``free_set_only`` a whole-GPU decision is keyed by
the free-GPU mask alone, so nodes whose busy GPUs differ only in how they are used (whole,
shared, unhealthy) share it too.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from threading import Lock

from topology.model import Topology
from topology.policies.base import Candidate, Decision, NodeState, NoFit, Request, cpu_and_numa
from topology.policies.registry import get_policy

_CACHE_SIZE = 65536
_cache: OrderedDict[tuple[object, ...], Decision | NoFit] = OrderedDict()
_lock = Lock()
stats = {"hits": 0, "misses": 0}


def _relabel(decision: Decision, topology: Topology) -> Decision:
    uuids = tuple(topology.gpus[g].uuid for g in decision.gpus)
    if uuids == decision.uuids:
        return decision
    cpus, numa = cpu_and_numa(topology, decision.gpus)
    return replace(decision, uuids=uuids, cpu_affinity=cpus, numa_nodes=numa)


def place(policy: str, topology: Topology, state: NodeState, request: Request) -> Decision:
    """Decide with the registered policy ``policy``, cached per topology class.

    Args:
        policy: a registered policy name.
        topology: the node.
        state: its used GPUs.
        request: the pod's request.

    Returns:
        The decision, labelled with this node's UUIDs and CPU affinity.

    Raises:
        UnknownPolicy: ``policy`` is not registered.
        NoFit: the node cannot host the request (cached too).
        RequestError: the request is invalid for the policy.
    """
    spec = get_policy(policy)
    skey: object = (
        ("free", state.mask(topology)) if spec.keys_by_free_mask(request) else state.key()
    )
    key = (policy, topology.topology_class, skey, request.key())
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            stats["hits"] += 1
    if hit is None:
        stats["misses"] += 1
        try:
            hit = spec.fn(topology, state, request)
        except NoFit as exc:
            hit = exc
        with _lock:
            _cache[key] = hit
            if len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    if isinstance(hit, NoFit):
        raise NoFit(str(hit))
    return _relabel(hit, topology)


def ideal(policy: str, topology: Topology, request: Request) -> Decision:
    """The decision ``policy`` makes for ``request`` on an idle node of this class (MAPA
    Fig. 4's "ideal" allocation). Raises :class:`NoFit` when even an idle node cannot host it."""
    return place(policy, topology, NodeState(), request)


def clear_cache() -> None:
    """Forget every cached decision (tests, benchmarks)."""
    with _lock:
        _cache.clear()
        stats["hits"] = stats["misses"] = 0


__all__ = ["Candidate", "clear_cache", "ideal", "place", "stats"]
