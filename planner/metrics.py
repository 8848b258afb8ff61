"""The planner's Prometheus metrics (prometheus-client, its own registry; served on
``/metrics`` by :func:`serve`).

=============================================  ==============================================
``gputopo_planner_plan_seconds``               histogram: time of one rescheduling point
``gputopo_planner_rescheduling_points_total``  counter by trigger (periodic, job-added, ...)
``gputopo_planner_actions_total``              counter by action (resume, suspend)
``gputopo_planner_jobs``                       gauge by state (waiting, running, stopping,
                                               finished, invalid)
``gputopo_planner_planned_energy_cost_eur``    gauge: energy of the runs the planner started,
                                               as it predicted them (stopped runs end when it
                                               stopped them), priced per node
``gputopo_planner_actual_energy_cost_eur``     gauge: the same from the pods' actual run times
``gputopo_planner_tardiness_cost_eur``         gauge: Σ ω × hours late of finished Jobs
``gputopo_planner_predicted_tardiness_cost_eur``  gauge: Σ ω τ of the last plan (Eq. 1)
``gputopo_planner_objective_eur``              gauge: f_OBJ of the last plan (Eq. 1)
``gputopo_planner_leader``                     gauge: 1 while this replica holds the Lease
=============================================  ==============================================
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    """The planner's metrics in one registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.plan_seconds = Histogram(
            "gputopo_planner_plan_seconds", "Time of one rescheduling point (plan + act)",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)
        self.points = Counter("gputopo_planner_rescheduling_points",
                              "Rescheduling points by trigger", ["trigger"], registry=r)
        self.actions = Counter("gputopo_planner_actions", "Job patches by action", ["action"],
                               registry=r)
        self.jobs = Gauge("gputopo_planner_jobs", "Managed Jobs by state", ["state"],
                          registry=r)
        self.planned_energy = Gauge("gputopo_planner_planned_energy_cost_eur",
                                    "Predicted energy cost of the runs the planner started, EUR",
                                    registry=r)
        self.actual_energy = Gauge("gputopo_planner_actual_energy_cost_eur",
                                   "Energy cost from the pods' actual run times, EUR",
                                   registry=r)
        self.tardiness = Gauge("gputopo_planner_tardiness_cost_eur",
                               "Tardiness cost of finished Jobs, EUR", registry=r)
        self.predicted_tardiness = Gauge("gputopo_planner_predicted_tardiness_cost_eur",
                                         "Tardiness cost the last plan predicts, EUR",
                                         registry=r)
        self.objective = Gauge("gputopo_planner_objective_eur",
                               "f_OBJ (ANDREAS Eq. 1) of the last plan, EUR", registry=r)
        self.leader = Gauge("gputopo_planner_leader", "1 while this replica leads",
                            registry=r)


def serve(metrics: Metrics, host: str, port: int) -> None:
    """Serve ``/metrics`` (and any other path, e.g. ``/healthz``, with the same page) in a
    background thread (prometheus-client's HTTP server)."""
    from prometheus_client import start_http_server

    start_http_server(port, addr=host, registry=metrics.registry)
