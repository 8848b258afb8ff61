"""MAPA: pattern matching with AggBW / EffBW / PreservedBW scoring (Ranganath et al., SC'21).

* ``mapa-greedy`` — the match with the highest AggBW (§3.4.1, Eq. 1), the paper's Greedy
  baseline.
* ``mapa-preserve`` — Algorithm 1 (§3.5.2): a bandwidth-sensitive job gets the match with the
  highest predicted EffBW (Eq. 2, Table 2 coefficients, exactly as published); an insensitive
  job gets the match that leaves the highest PreservedBW (Eq. 3).

Both score every match of the pattern graph in the free GPUs' hardware graph (§3.3; see
:mod:`topology.policies.matching` for how the search avoids enumerating millions of matches).
Ties go to the lexicographically smallest GPU set. Fractional requests are outside MAPA's
scope (§3.3: many-to-one mapping is future work): they get the lowest-index GPU with room.
"""

from __future__ import annotations

from topology.model import Topology
from topology.policies.base import Candidate, Decision, NodeState, Request
from topology.policies.common import (
    MODEL_MAPA,
    check_capacity,
    fractional_decision,
    shareable_gpus,
    whole_decision,
)
from topology.policies.matching import Match, Objective, search
from topology.policies.memo import Memo
from topology.policies.registry import register


def _runner_up(m: Match | None, effbw_attr: str) -> Candidate | None:
    if m is None:
        return None
    return Candidate(
        gpus=m.gpus,
        aggregated_bandwidth_gbps=m.aggbw,
        effective_bandwidth_gbps=getattr(m, effbw_attr),
        preserved_bandwidth_gbps=m.preserved,
    )


def _mapa(
    name: str, objective: Objective, topology: Topology, state: NodeState, request: Request,
    memo: Memo,
) -> Decision:
    if request.fractional:
        gpu = shareable_gpus(topology, state, request)[0]
        return fractional_decision(name, topology, state, request, gpu,
                                   reason="fractional request: lowest-index GPU with room")
    free = check_capacity(topology, state, request)
    result = search(topology, free, request.effective_pattern(), objective, memo=memo)
    what = {"aggbw": "highest AggBW (Eq. 1)", "effbw-mapa": "highest predicted EffBW (Eq. 2)",
            "preserved": "highest PreservedBW (Eq. 3)"}.get(objective, objective)
    exact = "" if result.exact else "; pruned search"
    return whole_decision(
        name, topology, state, request, result.best.mapping, MODEL_MAPA,
        runner_up=_runner_up(result.runner_up, "effbw_mapa"),
        reason=f"{what} among {result.subsets_scored} GPU sets{exact}",
    )


@register("mapa-greedy", "MAPA Greedy: the pattern match with the highest AggBW (Eq. 1)",
          free_set_only=True)
def mapa_greedy(topology: Topology, state: NodeState, request: Request, memo: Memo) -> Decision:
    """MAPA Greedy: maximise AggBW (MAPA §3.4.1, Eq. 1) over every match of the pattern.

    Raises:
        NoFit: fewer free GPUs than requested (or no GPU with room for a share).
    """
    return _mapa("mapa-greedy", "aggbw", topology, state, request, memo)


@register("mapa-preserve", "MAPA Preserve (Algorithm 1): sensitive → max EffBW (Eq. 2), "
          "insensitive → max PreservedBW (Eq. 3)", free_set_only=True)
def mapa_preserve(topology: Topology, state: NodeState, request: Request, memo: Memo) -> Decision:
    """MAPA Preserve (MAPA §3.5.2, Algorithm 1): bandwidth-sensitive → the match with the
    highest predicted EffBW (Eq. 2, Table 2 θ); insensitive → the highest PreservedBW (Eq. 3).

    Raises:
        NoFit: fewer free GPUs than requested (or no GPU with room for a share).
    """
    objective: Objective = "effbw-mapa" if request.sensitive else "preserved"
    return _mapa("mapa-preserve", objective, topology, state, request, memo)
