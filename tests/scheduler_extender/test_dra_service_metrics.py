"""The DRA allocator's ``/metrics`` page, read with prometheus-client's own parser (the
format Prometheus scrapes): every metric the module docstring names, with the values the
allocator and its state hold, and the decision histogram counting each decision."""

from __future__ import annotations

from typing import Any, cast

from prometheus_client.parser import text_string_to_metric_families

from scheduler_extender.dra.service import Service
from scheduler_extender.dra.settings import AllocatorSettings
from tests.scheduler_extender.dra_fakes import FakeAPI, claim_obj, drain, gpus, pod_obj, populate


class _Served(FakeAPI):
    """The fake API plus the lists and watches the service's feeds name (empty: this test
    feeds the allocator itself)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("list_"):
            return lambda *a, **k: ([], "1")
        if name.startswith("watch_"):
            return lambda *a, **k: iter(())
        raise AttributeError(name)


def _samples(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if not s.labels and not s.name.endswith("_created")}


def test_the_metrics_page_says_what_the_allocator_did() -> None:
    api = _Served()
    service = Service(AllocatorSettings(leader_elect=False, port=0), api=cast(Any, api))
    api.allocator = service.allocator
    populate(service.allocator, {"n0": "dgx1-v100"})
    before = _samples(service.metrics_text())
    assert before["gputopo_dra_allocator_leader"] == 1.0  # no election: it leads
    assert before["gputopo_dra_allocator_ready"] == 0.0  # not synced through its feeds
    assert before["gputopo_dra_allocator_decisions_total"] == 0.0
    assert before["gputopo_dra_allocator_decision_seconds_count"] == 0.0
    api.add_claim(claim_obj("ns", "four", [gpus("g", 4)]))
    api.add_pod(pod_obj("ns", "four", [("g", "four")]))
    api.add_claim(claim_obj("ns", "nine", [gpus("g", 9)]))
    api.add_pod(pod_obj("ns", "nine", [("g", "nine")]))
    drain(service.allocator)
    got = _samples(service.metrics_text())
    assert got["gputopo_dra_allocator_claims_allocated_total"] == 1.0
    assert got["gputopo_dra_allocator_pods_released_total"] == 1.0
    assert got["gputopo_dra_allocator_held_claims"] == 1.0
    assert got["gputopo_dra_allocator_waiting_pods"] == 1.0  # nine GPUs: no node has them
    assert got["gputopo_dra_allocator_write_errors_total"] == 0.0
    assert got["gputopo_dra_allocator_requeued_after_deallocation_total"] == 0.0
    assert got["gputopo_dra_allocator_device_taint_rules"] == 0.0
    decisions = got["gputopo_dra_allocator_decisions_total"]
    assert decisions >= 2  # each pod decided at least once
    assert got["gputopo_dra_allocator_decision_seconds_count"] == decisions
    assert got["gputopo_dra_allocator_decision_seconds_sum"] > 0
    service.allocator.stop()
