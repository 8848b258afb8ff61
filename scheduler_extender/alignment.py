"""The kubelet's NUMA alignment in the extender's decisions.

A node whose device plugin publishes a ``gputopo.io/topology-manager-policy`` other than
``none`` (:data:`topology.contract.LABEL_TOPOLOGY_MANAGER_POLICY`) has a kubelet that will
give a container only devices on the NUMA mask its Topology Manager picks from the *free*
devices — and will reject the pod outright under ``restricted`` / ``single-numa-node`` when the
mask is not preferred. :func:`topology.numa_alignment.align` predicts both; this module applies
the prediction to every candidate node before the policy decides:

* a node where the kubelet would reject the pod, or offers no GPU the pod could use, fails
  filter with the reason (resolvable: other pods leaving changes the free devices; except the
  pod's own shape, e.g. several GPU containers under the container scope);
* otherwise the policy decides on the node's state with every GPU the kubelet would not offer
  taken out (marked unavailable, as an unhealthy GPU is), so its choice lies on the mask and
  the device manager hands exactly those GPUs to the plugin.

Cheap and cacheable: the prediction is a function of (the node's kubelet settings, its
topology class, its state, the request, the pod's CPU facts); it is cached on exactly that key
(the state by its interned id), and so is the restricted state per (state, eligible GPUs). The
merge itself is memoised in the core. A node without the labels (the kubelet's default
``none``) costs one dict lookup.

What the extender cannot see: the static CPU manager's free CPUs. The prediction assumes every
NUMA node has the pod's Guaranteed CPUs free (docs/cpu-pinning.md says what happens when one
does not).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from scheduler_extender.cache import BoundedCache
from scheduler_extender.state import ClusterState, NodeView, intern_state
from topology.contract import KUBELET_CONFIG_LABELS, LABEL_TOPOLOGY_MANAGER_POLICY
from topology.model import Topology
from topology.numa_alignment import (
    KUBELET_DEFAULTS,
    Alignment,
    KubeletConfig,
    KubeletConfigError,
    PodDemand,
    align,
    complete_must_include,
    format_mask,
    kubelet_config_from_labels,
)
from topology.policies.base import Decision, NodeState, Request

_CACHE_SIZE = 65_536


class Refusal:
    """Why a node cannot take the pod because of its kubelet (a filter failure).

    Attributes:
        reason: one line.
        unresolvable: no eviction changes it.
    """

    __slots__ = ("reason", "unresolvable")

    def __init__(self, reason: str, unresolvable: bool) -> None:
        self.reason = reason
        self.unresolvable = unresolvable


class NUMAAlignment:
    """Applies each node's kubelet NUMA alignment to the views the policies decide on.

    Args:
        state: the state backend (its ``node_kubelet_config`` for nodes kube-scheduler sent by
            name only).
        memory_unit_mib: MiB per ``gputopo.io/vgpu-memory`` device.
    """

    def __init__(self, state: ClusterState, memory_unit_mib: int) -> None:
        self.state = state
        self.memory_unit_mib = memory_unit_mib
        self._seen: dict[str, KubeletConfig | KubeletConfigError] = {}
        #: bumped whenever the settings last seen for a node (``config`` from a Node object)
        #: change: what a node sent by name only is aligned with may then differ
        self.seen_version = 0
        self._labels = BoundedCache(1024)
        self._alignments = BoundedCache(_CACHE_SIZE)
        self._restricted = BoundedCache(_CACHE_SIZE)

    def clear(self) -> None:
        """Forget cached predictions and restricted states."""
        self._alignments.clear()
        self._restricted.clear()

    # ------------------------------------------------------------------ settings
    def config(self, name: str, node: Mapping[str, Any] | None) -> KubeletConfig | \
            KubeletConfigError:
        """The node's kubelet settings: from the labels of the Node kube-scheduler sent, else
        the state backend's, else those last seen for it; the kubelet's defaults (no
        alignment) when nothing is published."""
        if node is not None:
            meta = node.get("metadata")
            labels = meta.get("labels") if isinstance(meta, Mapping) else None
            labels = labels if isinstance(labels, Mapping) else {}
            parsed = self._parse(labels)
            if parsed is KUBELET_DEFAULTS:
                if self._seen.pop(name, None) is not None:
                    self.seen_version += 1
            elif self._seen.get(name) is not parsed:
                self._seen[name] = parsed
                self.seen_version += 1
            return parsed
        found = self.state.node_kubelet_config(name)
        if self._seen and (found is KUBELET_DEFAULTS or (
                isinstance(found, KubeletConfig) and not found.aligning)):
            return self._seen.get(name, found)
        return found

    def _parse(self, labels: Mapping[str, Any]) -> KubeletConfig | KubeletConfigError:
        """The settings of a Node's labels, cached by their values (the hot path: a Node
        without an aligning policy label is the defaults at once)."""
        policy = labels.get(LABEL_TOPOLOGY_MANAGER_POLICY)
        if policy is None or policy == "none":
            return KUBELET_DEFAULTS
        key = tuple(labels.get(k) for k in KUBELET_CONFIG_LABELS)
        hit: KubeletConfig | KubeletConfigError | None = self._labels.get(key)
        if hit is None:
            try:
                hit = kubelet_config_from_labels({k: v for k, v in zip(
                    KUBELET_CONFIG_LABELS, key, strict=True) if isinstance(v, str)})
            except KubeletConfigError as exc:
                hit = exc
            self._labels.put(key, hit)
        return hit

    # ------------------------------------------------------------------ views
    def apply(
        self, view: NodeView, config: KubeletConfig | KubeletConfigError, request: Request,
        demand: PodDemand, rid: int, *, by_free: bool = False,
        policy: str = "", place: Callable[[Topology, NodeState], Decision | None] | None = None,
    ) -> NodeView | Refusal:
        """``view`` as the policy should see it on a node whose kubelet has ``config``, or why
        the node cannot take the pod.

        Args:
            view: the node's view (its ``by_free`` variant or not).
            config: the node's kubelet settings (or why its labels are invalid).
            request: the pod's request.
            demand: the pod's CPU and container facts.
            rid: a small int standing for ``request`` (the caller's interned request key).
            by_free: return the restricted view's ``by_free`` variant.
            policy: the name of the pod's policy (``place``'s; part of the cache key).
            place: the pod's policy on a state (None: no fit), for a ``best-effort`` mask
                narrower than the request, where the kubelet takes that mask's free GPUs
                whatever the plugin says: the view is then restricted to the GPUs of
                :func:`topology.numa_alignment.complete_must_include` (the policy's own
                choice when it holds them, else the completion with the best EffBW).

        Returns:
            ``view`` itself when the kubelet does not align (or the node has no topology:
            the decision's precheck reports that), a view with the GPUs the kubelet would not
            offer taken out, or a :class:`Refusal`.
        """
        if isinstance(config, KubeletConfigError):
            return Refusal(f"the node's kubelet settings are unreadable: {config}", True)
        if not config.aligning or not isinstance(view.topology, Topology):
            return view
        topo = view.topology
        key = (config, topo.topology_class, view.state_id, rid, demand.key())
        a: Alignment | None = self._alignments.get(key)
        if a is None:
            a = align(topo, view.state, request, config, demand, unit_mib=self.memory_unit_mib)
            self._alignments.put(key, a)
        if not a.fits:
            return Refusal(a.reason, a.unresolvable)
        eligible = a.eligible
        if a.must_include:
            ckey = ("complete", policy, key)
            done: frozenset[int] | None | Refusal = self._alignments.get(ckey)
            if done is None:
                done = self._complete(a, view, topo, request, place)
                self._alignments.put(ckey, done)
            if isinstance(done, Refusal):
                return done
            eligible = done
        elif eligible >= frozenset(range(topo.size)) - view.state.unhealthy:
            return view
        rkey = (topo.topology_class, view.state_id, eligible)
        hit = self._restricted.get(rkey)
        if hit is None:
            restricted = replace(a, eligible=eligible).restrict(view.state, topo)
            skey = restricted.key()
            hit = (restricted, skey, intern_state(skey))
            self._restricted.put(rkey, hit)
        state, skey, sid = hit
        out = NodeView.of(view.name, topo, state, skey, sid)
        if by_free and out.by_free is not None:
            return out.by_free
        return out

    @staticmethod
    def _complete(
        a: Alignment, view: NodeView, topo: Topology, request: Request,
        place: Callable[[Topology, NodeState], Decision | None] | None,
    ) -> frozenset[int] | Refusal:
        """The GPUs for a pod whose kubelet takes ``a.must_include`` anyway."""
        why = Refusal(
            f"the node's kubelet ({a.config.topology_manager_policy}) would align the pod on "
            f"NUMA node(s) {format_mask(a.hint.mask)}, take GPUs "
            f"{','.join(map(str, sorted(a.must_include)))} there and ask the plugin for the "
            "rest, and no placement of the pod's policy holding them fits", False)
        if place is None:
            return why

        def gpus(state: NodeState) -> tuple[int, ...] | None:
            d = place(topo, state)
            return d.gpus if d is not None else None

        def effbw(state: NodeState) -> float | None:
            d = place(topo, state)
            return d.effective_bandwidth_gbps if d is not None else None

        chosen = complete_must_include(a, view.state, topo, request.count, gpus, effbw)
        return why if chosen is None else chosen
