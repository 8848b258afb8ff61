"""The first-principle methods ANDREAS is compared with (§V-B): FIFO, EDF and Priority
Scheduling.

§V-B: "first-principle methods never change the configuration assigned to a job once it has
been started, which entails that, if jobs with higher priority are submitted after long-running
jobs with lower priority, they have to wait for them to be completed before receiving
resources." So, at each rescheduling point, running jobs keep their node and GPUs; the waiting
jobs are taken in the method's order and started while GPUs are free:

* ``fifo`` — submission time, then id;
* ``edf`` — Earliest Deadline First: due date, then submission;
* ``ps`` — Priority Scheduling: the job's priority is its tardiness weight ω_j, highest first,
  then submission.

The paper does not say which configuration these methods give a job, so there are two
variants of each, and the benchmark reports both:

* ``fifo``, ``edf``, ``ps`` — Algorithm 1's rule (§IV-B) over the GPUs that are free: the
  cheapest configuration that meets the due date, else the fastest, else the next in
  ASSIGN_TO_SUBOPTIMAL's order (:func:`topology.planning.andreas._take`; the same node choice).
  The comparison then isolates what ANDREAS adds — re-planning, preemption and the randomised
  search — rather than a worse configuration rule: the strongest baselines we could give it.
* ``fifo-fastest``, ``edf-fastest``, ``ps-fastest`` — a first-principle scheduler with no
  energy model: each job gets the fastest configuration the free GPUs allow (the most GPUs
  that still speed it up), as a performance-only scheduler would. This is the reading under
  which §V-B's "first-principle methods" differ from ANDREAS in the configuration as well as
  in re-planning.

The queue is strict: a job that nothing free can hold blocks the jobs behind it (FIFO's
defining property), which with one-GPU configurations available happens only when no GPU is
free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from topology.planning.andreas import (
    Placement,
    PlanJob,
    PlannerSettings,
    PlanNode,
    _Classes,
    _job_data,
    _Option,
    _take,
    _validate,
)

#: The methods, by name, and their queue order (a sort key over :class:`PlanJob`).
ORDERS: dict[str, Callable[[PlanJob], tuple[float, ...]]] = {
    "fifo": lambda j: (j.submitted_s,),
    "edf": lambda j: (j.due_s, j.submitted_s),
    "ps": lambda j: (-j.weight_eur_per_h, j.submitted_s),
}


#: Configuration rules, by the suffix of the method's name ("" = Algorithm 1's rule): a sort of
#: a job's candidate options (:class:`topology.planning.andreas._JobData` ``ordered``) or None
#: to keep Algorithm 1's order.
RULES: dict[str, Callable[[Sequence[_Option]], list[_Option]] | None] = {
    "": None,
    "fastest": lambda opts: sorted(opts, key=lambda o: (o.time_s, o.cost_eur, o.cls, o.gpus)),
}

#: Every method name :func:`plan_queue` accepts: an order, optionally ``-<rule>``.
METHODS: tuple[str, ...] = tuple(
    f"{order}-{rule}" if rule else order for rule in RULES for order in ORDERS)


def plan_queue(method: str, now_s: float, nodes: Sequence[PlanNode], jobs: Sequence[PlanJob],
               settings: PlannerSettings | None = None) -> dict[str, Placement | None]:
    """One rescheduling point of FIFO / EDF / PS (module docstring).

    Args:
        method: one of :data:`METHODS`: ``fifo``, ``edf`` or ``ps``, optionally with
            ``-fastest`` (module docstring).
        now_s: the current time, s.
        nodes: the nodes.
        jobs: every submitted, unfinished job; those with ``current`` are running and keep it.
        settings: only ``price`` is used (c_ng for the cheapest-configuration rule).

    Returns:
        job id → placement (running jobs: unchanged; started jobs: new; others: None).

    Raises:
        PlanningError: inconsistent input; ValueError: unknown method.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    order, _, rule_name = method.partition("-")
    rule = RULES[rule_name]
    s = settings or PlannerSettings()
    node_index = _validate(nodes, jobs)
    classes = _Classes(nodes, s.price)
    free = [n.gpus for n in nodes]
    out: dict[str, Placement | None] = {}
    for j in jobs:
        if j.current is not None:
            free[node_index[j.current.node]] -= j.current.gpus
            out[j.id] = j.current
        else:
            out[j.id] = None
    buckets = classes.buckets(free)
    key = ORDERS[order]
    waiting = sorted((j for j in jobs if j.current is None), key=lambda j: (*key(j), j.id))
    for idx, job in enumerate(waiting):
        if sum(free) == 0:
            break
        d = _job_data(idx, job, classes, node_index, now_s, s)
        if not d.ordered:
            continue  # no node can ever run it: it must not block the queue
        candidates = d.ordered if rule is None else rule(d.ordered)
        placed = _take(d, candidates, classes, free, buckets)
        if placed is None:
            break  # strict queue: the head blocks the rest
        node, opt = placed
        out[job.id] = Placement(nodes[node].name, opt.gpus)
    return out
