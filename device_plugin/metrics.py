"""Prometheus metrics of the device plugin (one registry per plugin instance).

=================================================  ========================================
metric                                             meaning
=================================================  ========================================
``gputopo_dp_devices{resource}``                   devices advertised
``gputopo_dp_healthy_devices{resource}``           of which healthy
``gputopo_dp_allocate_seconds{resource}``          Allocate latency histogram, seconds
``gputopo_dp_allocate_errors_total{resource}``     Allocate calls refused
``gputopo_dp_preferred_errors_total{resource}``    GetPreferredAllocation calls refused
``gputopo_dp_identity_fallback_total{resource}``   pod chosen by admission order because the
                                                   pod-resources API was unavailable
``gputopo_dp_registrations_total{resource}``       successful Register calls to the kubelet
``gputopo_dp_annotation_errors_total``             failed pod/node patches
=================================================  ========================================
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """The plugin's metrics in their own :class:`CollectorRegistry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.devices = Gauge(
            "gputopo_dp_devices", "Devices advertised to the kubelet", ["resource"], registry=r
        )
        self.healthy = Gauge(
            "gputopo_dp_healthy_devices", "Healthy devices advertised", ["resource"], registry=r
        )
        self.allocate_seconds = Histogram(
            "gputopo_dp_allocate_seconds",
            "Allocate latency (seconds)",
            ["resource"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.allocate_errors = Counter(
            "gputopo_dp_allocate_errors_total", "Allocate calls refused", ["resource"], registry=r
        )
        self.preferred_errors = Counter(
            "gputopo_dp_preferred_errors_total",
            "GetPreferredAllocation calls refused",
            ["resource"],
            registry=r,
        )
        self.identity_fallback = Counter(
            "gputopo_dp_identity_fallback_total",
            "Pods identified by admission order (no pod-resources API)",
            ["resource"],
            registry=r,
        )
        self.registrations = Counter(
            "gputopo_dp_registrations_total",
            "Successful registrations with the kubelet",
            ["resource"],
            registry=r,
        )
        self.annotation_errors = Counter(
            "gputopo_dp_annotation_errors_total", "Failed pod or node patches", registry=r
        )

    def serve(self, port: int, host: str = "0.0.0.0") -> object:
        """Start the ``/metrics`` HTTP endpoint in a daemon thread; returns the server.

        Raises:
            OSError: the port cannot be bound.
        """
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server
