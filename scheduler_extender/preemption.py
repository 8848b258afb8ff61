"""Preemption: keep only the victim sets whose eviction gives the preemptor GPUs it can use.

kube-scheduler's preemption (``DefaultPreemption``, a PostFilter plugin) picks, on each node
where the pod failed, a set of lower-priority *victims* whose eviction makes the pod pass the
scheduler's own filters; then it asks every extender with a ``preemptVerb``
(``ProcessPreemption``, ``pkg/scheduler/extender.go``) which of those (node, victims) pairs
to keep, and evicts the victims of one kept node (its own choice among them: fewest
PodDisruptionBudget violations, then the lowest highest-priority victim, the lowest priority
sum, the fewest victims, the latest start time; ``pickOneNodeForPreemption``).

The scheduler's filters only count GPUs (``nvidia.com/gpu``). They do not see which GPUs the
victims hold, nor the GPU shares (``gputopo.io/vgpu-*`` are ``ignoredByScheduler``), nor
unhealthy GPUs, nor a policy's acceptance threshold (``topo-aware-p``'s minimum utility).
So the victims can free enough GPUs by count and still leave the pod without a placement its
policy accepts — it evicts pods and stays Pending (the class of problem of HAMi#1741). This
module asks the same decision layer as ``filter``
(:meth:`scheduler_extender.decision.Decider.decide`) where the pod would go on each node *as
if its proposed victims were gone* (``Candidate.without``; the live state is untouched) and:

* keeps a node, with exactly the victims proposed, when the policy then places the pod there;
* drops a node when it does not (and a node with no victims, a node the extender has no
  topology for, a node whose victims cannot be named by UID).

**Why a node's victim set is kept whole, never reduced to a subset.** The scheduler's set is
minimal for its own filters: ``SelectVictimsOnNode`` removes every lower-priority pod, then
puts them back one by one (those whose eviction would violate a PodDisruptionBudget first,
each group from the most important down), keeping a pod evicted only if the preemptor no
longer fits with it back. When victim ``v`` was kept evicted, the pods not yet put back were
still removed, so the node with only ``V − {v}`` evicted holds every pod that state held and
more; with monotone filters (resource fit is) the preemptor does not fit there either.
Hence *every proper subset of the proposal fails the scheduler's own filters*: a victim the
GPU policy does not need was proposed for something the extender cannot see (CPU, memory,
pods, a nominated pod's room), and leaving it out would evict the rest for nothing and
trigger a second round. Within one node the proposal is already the
fewest, least important pods (the scheduler reprieves the most important first); among the
nodes kept the scheduler's own ranking picks the fewest and lowest-priority victims. The
extender's reduction is therefore per node: all of the proposal or nothing.

**No postponement.** The preemptor is judged without the default policy's bounded
postponement (``Request.wait_for_better``), and filter judges it the same way once
kube-scheduler has nominated it (``PodRequest.may_wait``): a kept node's freed GPUs may be a
set the policy would otherwise wait to improve on ({1,4,6,7} for a 4-GPU ring on a DGX-1), but
pods are evicted for this one, and with them gone the scheduler's own filters see room on the
node, so ``SelectVictimsOnNode`` finds no victim there again and the pod would wait with
nothing to end the wait but ``postpone_max_s``.

**PodDisruptionBudgets.** The reply repeats the scheduler's ``NumPDBViolations`` for every
node kept: the victim set is unchanged, so the count is exact, and dropping a node never
adds a violation. The extender adds no pod (the scheduler rejects a reply naming a pod it
did not propose on that node, ``convertPodUIDToPod``) and keeps the scheduler's order of the
victims (decreasing importance; its node ranking reads the first as the highest priority).

No HTTP and no wire types here: :meth:`scheduler_extender.verbs.Extender.preempt` turns
``ExtenderPreemptionArgs`` into :class:`VictimSet` s and the verdicts into
``ExtenderPreemptionResult``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from scheduler_extender.decision import Ask, Candidate, Decider
from topology.policies.base import Decision

log = logging.getLogger("gputopo.extender")


@dataclass(frozen=True)
class Victim:
    """One pod proposed for eviction.

    Attributes:
        uid: the pod's UID as the scheduler names it (what the reply names); "" when the
            scheduler sent a pod without one (the node is then dropped).
        keys: the allocation keys it may hold in the state backend: its UID, and
            ``namespace/name`` when known (:attr:`scheduler_extender.state.PodRef.key`).
    """

    uid: str
    keys: frozenset[str]


@dataclass(frozen=True)
class VictimSet:
    """The victims the scheduler proposes on one node.

    Attributes:
        victims: in the scheduler's order (decreasing importance).
        pdb_violations: PodDisruptionBudgets evicting them all would violate
            (``NumPDBViolations``), passed back unchanged.
    """

    victims: tuple[Victim, ...]
    pdb_violations: int = 0


@dataclass(frozen=True)
class NodeVerdict:
    """Whether evicting a node's proposed victims gives the pod a placement.

    Attributes:
        name: node name.
        proposal: what the scheduler proposed there.
        keep: evict ``proposal`` there (True) or drop the node (False).
        reason: why a node is dropped ("" when kept).
        decision: where the pod would go once the victims are gone (None when dropped).
    """

    name: str
    proposal: VictimSet
    keep: bool
    reason: str = ""
    decision: Decision | None = None


class Preemption:
    """Judges kube-scheduler's preemption proposals with the decision layer of ``filter``.

    Args:
        decider: the extender's decision layer (decisions are exact here, whatever its time
            budget; node states without the victims are cached like any other state).
    """

    def __init__(self, decider: Decider) -> None:
        self.decider = decider

    def judge(self, ask: Ask, proposals: Mapping[str, VictimSet]) -> list[NodeVerdict]:
        """One verdict per proposed node, in the proposals' order.

        A node is kept exactly when the policy of ``ask`` places the pod on it with every
        proposed victim's allocation left out of the node's state; see the module docstring
        for why the proposal is never reduced.

        Args:
            ask: the preemptor's request and policy.
            proposals: node name → the victims the scheduler proposes there.

        Returns:
            Verdicts for every node of ``proposals``.

        Raises:
            BadRequest: the request is invalid for the policy (no node can help).
        """
        verdicts: dict[str, NodeVerdict] = {}
        candidates: list[Candidate] = []
        for name, proposal in proposals.items():
            if not proposal.victims:
                verdicts[name] = NodeVerdict(name, proposal, False, "no victims proposed")
            elif any(not v.uid for v in proposal.victims):
                verdicts[name] = NodeVerdict(
                    name, proposal, False, "a proposed victim has no UID to name it by"
                )
            else:
                without = frozenset().union(*(v.keys for v in proposal.victims))
                candidates.append(Candidate(name, None, without=without))
        for row in self.decider.decide(ask, candidates, verb="preempt"):
            proposal = proposals[row.name]
            decision = row.outcome.decision
            if decision is None:
                why = row.outcome.reason or "the policy places the pod nowhere on it"
                verdicts[row.name] = NodeVerdict(
                    row.name, proposal, False,
                    f"evicting the {len(proposal.victims)} proposed victim(s) does not free "
                    f"GPUs the pod can use: {why}",
                )
            else:
                verdicts[row.name] = NodeVerdict(row.name, proposal, True, "", decision)
        return [verdicts[name] for name in proposals]

