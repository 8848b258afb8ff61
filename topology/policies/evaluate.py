"""Run a policy with a per-topology-class cache: :class:`Evaluator`, the one entry point for
the extender, the CLI and the simulator.

Placement depends only on the topology *class* (link matrix, GPU models, bandwidth table),
the free state and the request, never on UUIDs or CPU numbers. So a decision computed for one
node is valid for every node of the same class in the same state: it is cached by
``(policy, class, state, request)`` and re-labelled with the asking node's UUIDs and CPUs.
Filter, prioritize and bind for one pod — and the next pods, on the nodes that did not change —
hit the cache. For policies registered with ``free_set_only`` a whole-GPU decision is keyed by
the free-GPU mask alone, so nodes whose busy GPUs differ only in how they are used (whole,
shared, unhealthy) share it too.

The cache is an object: each runner (the extender's decision layer, each worker process, each
simulation, the CLI) owns an :class:`Evaluator`, and with it the :class:`Memo` the policies
use; nothing is shared between two evaluators.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from threading import Lock

from topology.model import Topology
from topology.policies.base import (
    Candidate,
    Decision,
    NodeState,
    NoFit,
    Request,
    RequestError,
    cpu_and_numa,
)
from topology.policies.memo import Memo
from topology.policies.registry import get_policy

#: Decisions kept (least recently used go first).
CACHE_SIZE = 65536


def _relabel(decision: Decision, topology: Topology) -> Decision:
    uuids = tuple(topology.gpus[g].uuid for g in decision.gpus)
    if uuids == decision.uuids:
        return decision
    cpus, numa = cpu_and_numa(topology, decision.gpus)
    return replace(decision, uuids=uuids, cpu_affinity=cpus, numa_nodes=numa)


class Evaluator:
    """Registered policies run with caches this object owns (thread-safe).

    Args:
        size: decisions kept (least recently used go first).
        memo: what the policies may remember per class (a fresh :class:`Memo` when None;
            pass one to share tables between evaluators on purpose, e.g. the runs of one
            simulation).

    Attributes:
        memo: the :class:`Memo` handed to every policy call.
        hits: decisions answered from the cache since the last :meth:`clear_decisions`.
        misses: decisions computed since then.
    """

    def __init__(self, size: int = CACHE_SIZE, memo: Memo | None = None) -> None:
        self.size = size
        self.memo = memo if memo is not None else Memo()
        self.hits = 0
        self.misses = 0
        self._cache: OrderedDict[tuple[object, ...], Decision | NoFit] = OrderedDict()
        self._lock = Lock()

    def place(
        self, policy: str, topology: Topology, state: NodeState, request: Request
    ) -> Decision:
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
            RequestError: the request is invalid for the policy (e.g. a co-location slot
                for a policy that does not co-locate).
        """
        spec = get_policy(policy)
        if request.shared is not None and not spec.colocation:
            from topology.policies.registry import colocation_policies

            raise RequestError(
                f"policy {policy!r} does not place co-location slots (gputopo.io/gpu-shared); "
                f"use one of {', '.join(colocation_policies())}"
            )
        skey: object = (
            ("free", state.mask(topology)) if spec.keys_by_free_mask(request) else state.key()
        )
        key = (policy, topology.topology_class, skey, request.key())
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.hits += 1
        if hit is None:
            self.misses += 1
            try:
                hit = spec.fn(topology, state, request, self.memo)
            except NoFit as exc:
                hit = exc
            with self._lock:
                self._cache[key] = hit
                if len(self._cache) > self.size:
                    self._cache.popitem(last=False)
        if isinstance(hit, NoFit):
            raise type(hit)(str(hit))  # a fresh exception; Postponed stays Postponed
        return _relabel(hit, topology)

    def ideal(self, policy: str, topology: Topology, request: Request) -> Decision:
        """The decision ``policy`` makes for ``request`` on an idle node of this class (MAPA
        Fig. 4's "ideal" allocation).

        Raises:
            NoFit: even an idle node cannot host it.
            UnknownPolicy, RequestError: as :meth:`place`.
        """
        return self.place(policy, topology, NodeState(), request)

    def clear_decisions(self) -> None:
        """Forget every cached decision and reset :attr:`hits` / :attr:`misses` (the memo's
        tables stay)."""
        with self._lock:
            self._cache.clear()
            self.hits = self.misses = 0

    def clear(self) -> None:
        """Forget decisions and the memo (cold-cache benchmarks, tests)."""
        self.clear_decisions()
        self.memo.clear()


__all__ = ["CACHE_SIZE", "Candidate", "Evaluator"]
