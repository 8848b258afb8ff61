"""Wire types of the kube-scheduler HTTP extender (``k8s.io/kube-scheduler/extender/v1``).

The Go types carry no JSON tags, so the keys on the wire are the Go field names (``Pod``,
``Nodes``, ``NodeNames``, ``FailedNodes`` …); kube-scheduler decodes replies
case-insensitively, we always answer with the exact Go names.

``Pod`` and the ``Nodes`` items stay permissive dicts (``extra`` allowed): they are full
``v1.Pod`` / ``v1.Node`` objects of which the extender reads a handful of fields
(:mod:`scheduler_extender.podspec` validates what it reads). Validating them field by field
would cost more than the whole placement decision for a 1,000-node ``NodeList``.

Scores are 0–:data:`MAX_EXTENDER_PRIORITY` (``MaxExtenderPriority`` = 10).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from topology.policies.scoring import MAX_SCORE

#: kube-scheduler's ``extenderv1.MaxExtenderPriority`` (the scale node scores use).
MAX_EXTENDER_PRIORITY = MAX_SCORE
MIN_EXTENDER_PRIORITY = 0


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class NodeList(_Wire):
    """``v1.NodeList``: ``items`` are ``v1.Node`` objects kept as dicts."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(_Wire):
    """Body of ``POST /filter`` and ``POST /prioritize``.

    Exactly one of ``Nodes`` (``nodeCacheCapable: false``: full Node objects) and
    ``NodeNames`` (``nodeCacheCapable: true``) carries the candidate nodes.
    """

    Pod: dict[str, Any]
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class ExtenderFilterResult(_Wire):
    """Reply of ``POST /filter``.

    ``Nodes`` answers a request that carried ``Nodes`` (the same node objects that passed),
    ``NodeNames`` one that carried ``NodeNames``. ``FailedNodes`` maps a node to why it
    failed (preemption may help: GPUs are busy); ``FailedAndUnresolvableNodes`` to a reason
    preemption cannot fix (no or invalid topology, too few GPUs in total). ``Error`` fails the
    whole pod (invalid pod annotations); kube-scheduler expects it with HTTP 200.
    """

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(_Wire):
    """One entry of the ``POST /prioritize`` reply (a JSON array of these)."""

    Host: str
    Score: int = Field(ge=MIN_EXTENDER_PRIORITY, le=MAX_EXTENDER_PRIORITY)


class ExtenderBindingArgs(_Wire):
    """Body of ``POST /bind``."""

    PodName: str = Field(min_length=1)
    PodNamespace: str = Field(min_length=1)
    PodUID: str = ""
    Node: str = Field(min_length=1)


class ExtenderBindingResult(_Wire):
    """Reply of ``POST /bind``: empty ``Error`` means bound."""

    Error: str = ""


class MetaPod(_Wire):
    """``MetaPod``: a victim named by its UID only (``nodeCacheCapable: true``)."""

    UID: str = Field(min_length=1)


class MetaVictims(_Wire):
    """``MetaVictims``: the pods proposed for eviction on one node, by UID, and how many
    PodDisruptionBudgets evicting them all would violate (``NumPDBViolations``).

    ``Pods`` is in the scheduler's order: decreasing importance (priority, then earlier start
    time), which its node choice reads (``Pods[0]`` is taken as the highest priority).
    """

    Pods: list[MetaPod] | None = None
    NumPDBViolations: int = 0


class Victims(_Wire):
    """``Victims``: like :class:`MetaVictims` with full ``v1.Pod`` objects (kept as dicts;
    ``nodeCacheCapable: false``)."""

    Pods: list[dict[str, Any]] | None = None
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(_Wire):
    """Body of ``POST /preempt`` (kube-scheduler's ``ProcessPreemption``).

    ``Pod`` is the preemptor. Exactly one of ``NodeNameToMetaVictims`` (``nodeCacheCapable:
    true``) and ``NodeNameToVictims`` (``nodeCacheCapable: false``) carries, per candidate
    node, the victims the scheduler's own preemption chose; the other is ``null``.
    """

    Pod: dict[str, Any]
    NodeNameToVictims: dict[str, Victims | None] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims | None] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> ExtenderPreemptionArgs:
        if self.NodeNameToVictims is not None and self.NodeNameToMetaVictims is not None:
            raise ValueError(
                "set NodeNameToMetaVictims (nodeCacheCapable) or NodeNameToVictims, not both"
            )
        return self


class ExtenderPreemptionResult(_Wire):
    """Reply of ``POST /preempt``: the candidate nodes the extender keeps, each with the
    victims to evict there (by UID, whatever form the request took). A node left out is
    not preempted on; every node kept must name at least one victim, and only pods the
    scheduler proposed on that node (it rejects the whole reply otherwise)."""

    NodeNameToMetaVictims: dict[str, MetaVictims] = Field(default_factory=dict)


class ErrorBody(_Wire):
    """Body of 400/404/500 replies: one line saying what was wrong."""

    Error: str
