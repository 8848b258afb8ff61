"""The DRA allocator with generated claims and pods: ResourceClaims and pods as the API
server could send them — every string and integer of their spec and annotations any value of
its type — decided one after another on one DGX-1 V100. Nothing raises; a claim it cannot
serve leaves its pod waiting with a one-line reason; a GPU is never allocated whole to two
claims, nor beyond the node. (Hand-picked claims and what each must get are in
``test_dra_allocator.py``.)"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.scheduler_extender.dra_fakes import (
    claim_obj,
    cluster,
    drain,
    gpus,
    pod_obj,
    share,
    slot,
)
from topology import dra
from topology.contract import ANN_BW_SENSITIVE, ANN_COLOCATION, ANN_PATTERN, ANN_POLICY

WORDS = st.sampled_from([
    "", "0", "1", "-1", "3", "8", "ring", "all-to-all", "0-1,1-2", "0-\u00b2", "true",
    "false", "gputopo", "mapa-greedy", "nope", "4Gi", "500Mi", "-1Gi", "1e3", "50", "150",
    dra.CLASS_GPU, dra.CLASS_SHARE, dra.CLASS_SLOT, "gpu.nvidia.com", "All", "ExactCount",
    '{"job": "a"}', "{}", "\u00b2", " ",
]) | st.text(max_size=10)
INTS = st.sampled_from([0, 1, 2, 3, 5, 8, 9, -1, 2**31]) | st.integers(-3, 20)
ANNOTATIONS = (ANN_PATTERN, ANN_BW_SENSITIVE, ANN_POLICY, ANN_COLOCATION)
BASES = [gpus("g", 2), gpus("g", 3), share("s", 30, "4Gi"), slot("c")]


def _leaves(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every string and integer (not bool) in ``doc``."""
    if isinstance(doc, (str, int)) and not isinstance(doc, bool):
        return [at]
    items: Any = doc.items() if isinstance(doc, dict) else (
        enumerate(doc) if isinstance(doc, list) else ())
    return [p for k, v in items for p in _leaves(v, (*at, k))]


@st.composite
def api_shaped_request(draw: st.DrawFn) -> dict[str, Any]:
    """A claim request with up to two strings or integers set to any value of its type
    (none, half the time: the claims beside a bad one are what must still be served)."""
    out = copy.deepcopy(draw(st.sampled_from(BASES)))
    damage = draw(st.lists(st.sampled_from(_leaves(out)), max_size=2)) \
        if draw(st.booleans()) else []
    for path in damage:
        parent = out
        for k in path[:-1]:
            parent = parent[k]
        old = parent[path[-1]]
        parent[path[-1]] = draw(WORDS if isinstance(old, str) else INTS)
    return out


JOBS = st.lists(st.tuples(st.lists(api_shaped_request(), min_size=1, max_size=2),
                          st.dictionaries(st.sampled_from(ANNOTATIONS), WORDS, max_size=1)),
                min_size=1, max_size=4)


@settings(max_examples=100, deadline=None)
@given(jobs=JOBS)
def test_any_claims_are_allocated_within_the_node_or_wait_with_a_reason(
        jobs: list[tuple[list[dict[str, Any]], dict[str, str]]]) -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    try:
        for i, (requests, annotations) in enumerate(jobs):
            names = [f"r{j}" for j in range(len(requests))]
            named = [{**r, "name": n} for r, n in zip(requests, names, strict=True)]
            api.add_claim(claim_obj("ns", f"c{i}", named))
            api.add_pod(pod_obj("ns", f"p{i}", [("x", f"c{i}")], annotations=annotations))
        drain(alloc)
        whole: list[int] = []
        for c in api.claims.values():
            allocation = c.get("status", {}).get("allocation")
            for d in [r["device"] for r in allocation["devices"]["results"]] if allocation \
                    else []:
                ref = dra.parse_device_name(d)
                assert 0 <= ref.index < 8
                if ref.kind is dra.DeviceKind.GPU:
                    whole.append(ref.index)
        assert len(whole) == len(set(whole)), whole  # no GPU whole to two claims
        allocated = sum(1 for c in api.claims.values() if c.get("status", {}).get("allocation"))
        event(f"claims allocated: {min(allocated, 3)}{'+' if allocated > 3 else ''}")
        for _name, reason, message in api.events:
            assert reason and message and "\n" not in message and "Traceback" not in message
    finally:
        alloc.stop()
