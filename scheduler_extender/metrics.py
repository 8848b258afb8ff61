"""Prometheus metrics of one extender instance (its own registry, so several apps — tests,
the demo's two extenders — never collide on metric names)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

#: Latency buckets, seconds: fine up to 100 ms, where the targets are (filter over 1,000 nodes
#: and bind p99 under 50 ms), so ``histogram_quantile`` reads p50/p99 to a few milliseconds.
_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
    0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0,
)


class Metrics:
    """Counters and histograms exposed on ``GET /metrics``.

    Attributes:
        requests: ``gputopo_extender_requests_total{verb, outcome}`` — outcome ``ok``,
            ``error`` (an ``Error`` in the reply), ``bad_request`` (HTTP 4xx) or
            ``not_ready`` (503: the cluster state has not synced yet).
        latency: ``gputopo_extender_request_seconds{verb}``.
        bind_errors: ``gputopo_extender_bind_errors_total{reason}``.
        decisions: ``gputopo_extender_decisions_total{policy}`` — successful binds.
        provisional: ``gputopo_extender_provisional_total`` — node groups answered
            provisionally because their decision missed the time budget.
        preemption_nodes: ``gputopo_extender_preemption_nodes_total{outcome}`` — candidate
            nodes of ``/preempt`` kept (``kept``: evicting the proposed victims frees GPUs
            the pod can use) or ``dropped``.
        bind_api: ``gputopo_extender_bind_api_seconds`` — the state backend's bind call
            alone (on Kubernetes the Binding's round trip to the API server), so a slow bind
            can be told apart: the API server's time or the extender's.
        auth: ``gputopo_extender_auth_requests_total{result}`` — requests to authenticated
            paths (the verbs) when caller authentication is on: ``ok``, ``unauthenticated``
            (401, no client certificate) or ``forbidden`` (403: not loopback, or a client
            certificate whose name is not allowed).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "gputopo_extender_requests_total", "Extender requests by verb and outcome.",
            ["verb", "outcome"], registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "gputopo_extender_request_seconds", "Extender request latency, seconds.",
            ["verb"], buckets=_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.bind_errors = Counter(
            "gputopo_extender_bind_errors_total", "Failed binds by reason.",
            ["reason"], registry=self.registry,
        )  # fmt: skip
        self.decisions = Counter(
            "gputopo_extender_decisions_total", "Pods bound, by the policy that decided.",
            ["policy"], registry=self.registry,
        )  # fmt: skip
        self.provisional = Counter(
            "gputopo_extender_provisional_total",
            "Node groups answered provisionally (decision not ready within the budget).",
            registry=self.registry,
        )
        self.preemption_nodes = Counter(
            "gputopo_extender_preemption_nodes_total",
            "Preemption candidate nodes kept or dropped by the extender.",
            ["outcome"], registry=self.registry,
        )  # fmt: skip
        self.bind_api = Histogram(
            "gputopo_extender_bind_api_seconds",
            "The state backend's bind call (the Binding's API round trip), seconds.",
            buckets=_BUCKETS, registry=self.registry,
        )  # fmt: skip

        self.auth = Counter(
            "gputopo_extender_auth_requests_total",
            "Requests to the extender's authenticated paths, by result.",
            ["result"], registry=self.registry,
        )  # fmt: skip

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
