"""Gangs: multi-pod Jobs the planner admits whole, inside one topology domain — pure: API JSON
in, plain data and JSON Patches out.

A **gang** is a batch/v1 Job labelled ``gputopo.io/queue`` with ``completionMode: Indexed``
and ``parallelism`` = ``completions``, created with ``spec.suspend: true`` — usually several
pods; a gang of one is admitted the same way (a cluster that sends every Job through the
planner, as Kueue wants every workload through its queues, needs no race between the pods it
admits and pods scheduled past it). Its pods ask
for the same ``nvidia.com/gpu`` each. Optional, on the Job or its pod template:
``gputopo.io/topology-required`` or ``-preferred`` (a level label, as Kueue's
``kueue.x-k8s.io/podset-required-topology``/``-preferred-topology``), ``gputopo.io/pattern``
and ``gputopo.io/bandwidth-sensitive`` (each pod's), and on the Job ``gputopo.io/priority``
(an integer, default 0).

At every rescheduling point (:meth:`planner.controller.Planner.reconcile`) the waiting gangs
are taken by priority, then age (Kueue's BestEffortFIFO: one that does not fit is passed
over; gangs created in the same second — ``creationTimestamp`` has one-second resolution — in
the order the planner's Job watch first delivered them, the API's creation order, not by
name), and each is admitted only when *every* pod fits inside one domain
(:func:`topology.gang.choose`: the tightest domain, by bandwidth, then PreservedBW). Admitting
is one patch (:func:`admission_patch`) of the suspended Job: its pod template gets a required
node affinity to the chosen nodes, and ``gputopo.io/planned-nodes`` — the node of every
completion index, which the extender enforces pod by pod while it picks each pod's GPUs —
and ``spec.suspend: false``. A gang that does not fit stays suspended: no pod, no GPU held.

**Preemption, whole.** A waiting gang that would fit if some running gangs of lower priority
were gone suspends them (lowest priority first, then the most recently admitted, as Kueue's
``CandidatesOrdering``: the least work lost) — the Job controller then
deletes all their pods at once — and is admitted at a later point, once their pods are gone.
It preempts nothing while gangs it could use are still stopping.

**Postponement** (issue 24; the ``gputopo`` chooser). A gang of one bandwidth-sensitive pod
of several GPUs is what the extender would place as a lone pod, and it waits the same way:
its request carries ``wait_for_better`` (:func:`topology.gang.with_postponement`), so the
default policy refuses a node whose free GPUs offer no set at its threshold of the ideal
EffBW (Amaral et al. SC'17, Algorithm 1's postponement;
:func:`topology.policies.default.postpone_below`: on a DGX-1 V100 a 3-GPU ring waits rather
than take {1,5,6}), and the gang stays suspended until a point where
some node offers one, or until ``postpone_max_s`` (1 800 s) after it was first postponed; an
idle node is never refused. The clock starts at the first postponement, not at the Job's
creation: a gang that queued an hour for lack of GPUs may still wait for a good set once it
could start, and the bound is on the delay the postponement itself adds (as the extender's and
the simulators'). Its start is kept in the gang's ``gputopo.io/plan`` (``postponedAt``), so a
new leader continues the same clock. A postponed gang preempts nothing: it could start now.
Gangs of several pods are not postponed (a gang's bandwidth is mostly its NICs', and its pods
start together).

What the node states count (:func:`gang_nodes`): the GPUs of every pod bound to the node that
is not finished (its ``gputopo.io/gpu-indices`` when the extender bound it, else as many GPUs
as it asks for), and the GPUs promised to pods not bound yet: the pods of admitted gangs and
of running planner Jobs, on their planned nodes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.cluster import job_of, pod_gpus, pod_terminal
from planner.jobs import (
    HOSTNAME_LABEL,
    JobLifecycle,
    _meta,
    _time_or_none,
    format_time,
    gpu_container,
    plan_of,
)
from topology.contract import (
    ANN_BW_SENSITIVE,
    ANN_COMPLETION_INDEX,
    ANN_GPU_INDICES,
    ANN_NETWORK,
    ANN_PATTERN,
    ANN_PLANNED_NODES,
    ANN_PRIORITY,
    ANN_TOPOLOGY,
    ANN_TOPOLOGY_PREFERRED,
    ANN_TOPOLOGY_REQUIRED,
    LABEL_QUEUE,
    RESOURCE_GPU,
    format_planned_nodes,
    parse_planned_nodes,
)
from topology.gang import (
    Gang,
    GangNode,
    GangNoFit,
    GangPlan,
    choose,
    choose_kueue,
    with_postponement,
)
from topology.hierarchy import Hierarchy, HierarchyError
from topology.model import Topology, TopologyError
from topology.network import NetworkError, NodeNetwork, from_labels
from topology.network import loads as load_network
from topology.patterns import PatternError, parse_pattern
from topology.policies.base import NodeState, Request, RequestError
from topology.policies.default import POSTPONE_MAX_S
from topology.policies.evaluate import Evaluator
from topology.serialization import loads as load_topology
from topology.text import decimal_int

#: The choosers the planner can admit gangs with (``PlannerSettings.gang_chooser``).
CHOOSERS = {"gputopo": choose, "kueue-tas": choose_kueue}


@dataclass(frozen=True)
class ManagedGang(JobLifecycle):
    """What the planner reads from one gang Job.

    Attributes:
        namespace, name, uid, resource_version: identity.
        pods: parallelism = completions.
        gpus: ``nvidia.com/gpu`` of each pod.
        pattern, sensitive: each pod's pattern text and bandwidth sensitivity (None: the
            default).
        required, preferred: the level label (Kueue's podset topology request).
        priority: ``gputopo.io/priority``.
        suspended, active, started, finished: as :class:`planner.jobs.ManagedJob`.
        planned: completion index → node, from the template (empty until admitted).
        completed: indices whose pod has succeeded (``status.completedIndexes``): they hold
            nothing any more.
        created_s: creation time, Unix seconds (the API's one-second resolution).
        admitted_s: when the planner admitted it, Unix seconds to the millisecond (its
            ``gputopo.io/plan``'s ``decidedAt`` while the plan's state is ``running``); None
            when not running or admitted by no planner.
        postponed_s: when the planner first postponed it (module docstring, "Postponement"),
            Unix seconds (its ``gputopo.io/plan``'s ``postponedAt`` while the plan's state is
            ``waiting``); None when never postponed.
        error: why it cannot be admitted ("" when it can).
    """

    namespace: str
    name: str
    uid: str
    resource_version: str
    pods: int = 0
    gpus: int = 0
    pattern: str | None = None
    sensitive: bool | None = None
    required: str | None = None
    preferred: str | None = None
    priority: int = 0
    suspended: bool = True
    active: int = 0
    started: bool = False
    finished: bool = False
    planned: Mapping[int, str] = field(default_factory=dict)
    completed: frozenset[int] = frozenset()
    created_s: float = 0.0
    admitted_s: float | None = None
    postponed_s: float | None = None
    error: str = ""

    def gang(self) -> Gang:
        """The gang as the choosers take it.

        Raises:
            RequestError: a malformed pattern or count.
        """
        try:
            pattern = parse_pattern(self.pattern, self.gpus) if self.pattern else None
        except PatternError as exc:
            raise RequestError(str(exc)) from None
        return Gang(self.pods, Request(count=self.gpus, pattern=pattern,
                                       bandwidth_sensitive=self.sensitive),
                    required=self.required, preferred=self.preferred)


def is_gang(obj: Mapping[str, Any]) -> bool:
    """An Indexed Job: a gang, of one pod or more (the planner's other Jobs, NonIndexed, are
    ANDREAS')."""
    spec: Mapping[str, Any] = obj.get("spec") or {}
    return spec.get("completionMode") == "Indexed"


def _conditions(status: Mapping[str, Any]) -> set[str]:
    return {str(c.get("type")) for c in status.get("conditions") or []
            if isinstance(c, Mapping) and str(c.get("status")) == "True"}


def parse_gang(obj: Mapping[str, Any]) -> ManagedGang:
    """A gang Job as a :class:`ManagedGang`; malformed input gives ``error`` (the planner
    reports it in an Event and leaves the Job alone), never an exception."""
    meta = _meta(obj)
    spec: Mapping[str, Any] = obj.get("spec") or {}
    status: Mapping[str, Any] = obj.get("status") or {}
    template: Mapping[str, Any] = spec.get("template") or {}
    tmeta = _meta(template)
    tspec: Mapping[str, Any] = template.get("spec") or {}
    ann: dict[str, str] = {**(tmeta.get("annotations") or {}), **(meta.get("annotations") or {})}
    conds = _conditions(status)
    base = dict(
        namespace=str(meta.get("namespace", "default")), name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")), resource_version=str(meta.get("resourceVersion", "")),
        suspended=bool(spec.get("suspend", False)), active=int(status.get("active") or 0),
        started=status.get("startTime") is not None,
        finished="Complete" in conds or "Failed" in conds,
        created_s=_time_or_none(str(meta.get("creationTimestamp", ""))) or 0.0,
        completed=_indexes(str(status.get("completedIndexes") or "")),
        admitted_s=_admitted_s(obj),
        postponed_s=_postponed_s(obj),
    )
    try:
        parallelism = int(spec.get("parallelism") or 1)
        completions = int(spec.get("completions") or 1)
        if parallelism != completions:
            raise ValueError(f"a gang needs parallelism = completions (got {parallelism} and "
                             f"{completions}): every pod runs at once")
        containers = tspec.get("containers") or [{}]
        gpus = pod_gpus({"spec": {"containers": [containers[gpu_container(tspec)]]}})
        if gpus < 1:
            raise ValueError(f"its pods ask for no {RESOURCE_GPU}")
        required = ann.get(ANN_TOPOLOGY_REQUIRED) or None
        preferred = ann.get(ANN_TOPOLOGY_PREFERRED) or None
        if required and preferred:
            raise ValueError(f"{ANN_TOPOLOGY_REQUIRED} and {ANN_TOPOLOGY_PREFERRED} together")
        priority = int(ann.get(ANN_PRIORITY, "0") or "0")
        sens_text = ann.get(ANN_BW_SENSITIVE)
        sensitive = None if sens_text is None else sens_text.strip().lower() == "true"
        planned = parse_planned_nodes(ann[ANN_PLANNED_NODES]) if ann.get(ANN_PLANNED_NODES) \
            else {}
        gang = ManagedGang(pods=completions, gpus=gpus, pattern=ann.get(ANN_PATTERN) or None,
                           sensitive=sensitive, required=required, preferred=preferred,
                           priority=priority, planned=planned, **base)  # type: ignore[arg-type]
        gang.gang()  # validates pattern and counts
        return gang
    except (ValueError, RequestError) as exc:
        return ManagedGang(error=str(exc), **base)  # type: ignore[arg-type]


def _admitted_s(obj: Mapping[str, Any]) -> float | None:
    """When the planner admitted this gang (its plan's ``decidedAt``, written in the admission
    patch itself), or None when its plan is not ``running`` or unreadable."""
    doc = plan_of(obj)
    if doc is None or doc.get("state") != "running":
        return None
    return _time_or_none(str(doc.get("decidedAt") or ""))


def _postponed_s(obj: Mapping[str, Any]) -> float | None:
    """When the planner first postponed this gang (its plan's ``postponedAt`` while the plan
    is ``waiting``), or None."""
    doc = plan_of(obj)
    if doc is None or doc.get("state") != "waiting":
        return None
    return _time_or_none(str(doc.get("postponedAt") or ""))


def _indexes(text: str) -> frozenset[int]:
    """The Job controller's index list (``1,3-5``); malformed parts are ignored."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            out.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            continue
    return frozenset(out)


# ------------------------------------------------------------------------------ node states

def _node_ready(obj: Mapping[str, Any]) -> bool:
    if (obj.get("spec") or {}).get("unschedulable"):
        return False
    return any(c.get("type") == "Ready" and str(c.get("status")) == "True"
               for c in (obj.get("status") or {}).get("conditions") or []
               if isinstance(c, Mapping))


def _busy_indices(pods: Iterable[Mapping[str, Any]], size: int) -> tuple[set[int], int]:
    """GPU indices the extender annotated on these pods, and the count of GPUs other pods on
    the node ask for without saying which."""
    busy: set[int] = set()
    unnamed = 0
    for pod in pods:
        text = (_meta(pod).get("annotations") or {}).get(ANN_GPU_INDICES)
        named: set[int] = set()
        if text:
            try:
                named = {int(x) for x in str(text).split(",") if x.strip()}
            except ValueError:
                named = set()
        named = {g for g in named if 0 <= g < size}
        if named:
            busy |= named
        else:
            unnamed += pod_gpus(pod)
    return busy, unnamed


def gang_nodes(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
               hierarchy: Hierarchy, promised: Mapping[str, int] | None = None
               ) -> tuple[list[GangNode], list[str]]:
    """The Ready, schedulable nodes that publish a topology, as the choosers see them, and a
    line per node left out (bad annotations).

    Args:
        nodes: Node objects.
        pods: every pod (finished ones are ignored).
        hierarchy: the levels (a node's path comes from its labels).
        promised: GPUs per node promised to pods not bound yet (module docstring).
    """
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and not pod_terminal(pod):
            by_node.setdefault(str(node), []).append(pod)
    out: list[GangNode] = []
    skipped: list[str] = []
    for obj in nodes:
        meta = _meta(obj)
        name = str(meta.get("name", ""))
        ann: Mapping[str, str] = meta.get("annotations") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        if not _node_ready(obj) or ANN_TOPOLOGY not in ann:
            continue
        try:
            topo: Topology = load_topology(ann[ANN_TOPOLOGY])
            network: NodeNetwork | None = (load_network(ann[ANN_NETWORK]) if ANN_NETWORK in ann
                                           else from_labels(labels, topo))
            if network is not None:
                network.check(topo)
        except (TopologyError, NetworkError) as exc:
            skipped.append(f"node {name}: {exc}")
            continue
        busy, unnamed = _busy_indices(by_node.get(name, []), topo.size)
        unnamed += (promised or {}).get(name, 0)
        for g in range(topo.size):  # GPUs promised or held without indices: the lowest free
            if unnamed <= 0:
                break
            if g not in busy:
                busy.add(g)
                unnamed -= 1
        out.append(GangNode(name, hierarchy.path(name, labels), topo, NodeState.whole(busy),
                            network))
    return out, skipped


def promised_gpus(gangs: Iterable[ManagedGang], pods: Sequence[Mapping[str, Any]],
                  singles: Iterable[tuple[str, str, int]] = ()) -> dict[str, int]:
    """GPUs per node promised to pods not bound yet: the indices of admitted gangs that have
    no bound pod, and the planner's running single-pod Jobs (``(uid, node, gpus)``) with no
    bound pod."""
    bound: dict[str, set[int]] = {}
    bound_jobs: set[str] = set()
    for pod in pods:
        uid = job_of(pod)
        if uid is None or pod_terminal(pod) or not (pod.get("spec") or {}).get("nodeName"):
            continue
        bound_jobs.add(uid)
        index = (_meta(pod).get("annotations") or {}).get(ANN_COMPLETION_INDEX)
        i = decimal_int(str(index)) if index is not None else None
        if i is not None:
            bound.setdefault(uid, set()).add(i)
    out: dict[str, int] = {}
    for g in gangs:
        if not g.running:
            continue
        for i, node in g.planned.items():
            if i not in bound.get(g.uid, set()) and i not in g.completed:
                out[node] = out.get(node, 0) + g.gpus
    for uid, node, gpus in singles:
        if uid not in bound_jobs:
            out[node] = out.get(node, 0) + gpus
    return out


# ------------------------------------------------------------------------------ deciding

@dataclass
class Admission:
    """What one rescheduling point does with the gangs (:func:`decide`)."""

    admit: list[tuple[ManagedGang, GangPlan]] = field(default_factory=list)
    preempt: list[tuple[ManagedGang, ManagedGang]] = field(default_factory=list)  # victim, for
    waiting: list[tuple[ManagedGang, str]] = field(default_factory=list)
    invalid: list[ManagedGang] = field(default_factory=list)
    #: Job UID -> when its postponement began (Unix s), for every waiting gang postponed now
    #: or earlier: the ``postponedAt`` its waiting status keeps
    postponed: dict[str, float] = field(default_factory=dict)


def _free(nodes: list[GangNode], index: Mapping[str, int], gang: ManagedGang,
          pods: Sequence[Mapping[str, Any]]) -> None:
    """Give back, in ``nodes``, the GPUs of ``gang``'s pods (bound or promised)."""
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if job_of(pod) != gang.uid or not node or str(node) not in index:
            continue
        i = index[str(node)]
        n = nodes[i]
        busy, unnamed = _busy_indices([pod], n.topology.size)
        mine = busy or set(range(unnamed))
        left = [g for g in range(n.topology.size)
                if g not in n.state.free_gpus(n.topology) and g not in mine]
        nodes[i] = GangNode(n.name, n.path, n.topology, NodeState.whole(left), n.network)
    bound = {(_meta(p).get("annotations") or {}).get(ANN_COMPLETION_INDEX) for p in pods
             if job_of(p) == gang.uid and (p.get("spec") or {}).get("nodeName")}
    for k, node in gang.planned.items():
        if str(k) in bound or k in gang.completed or node not in index:
            continue
        i = index[node]
        n = nodes[i]
        held = [g for g in range(n.topology.size) if g not in n.state.free_gpus(n.topology)]
        nodes[i] = GangNode(n.name, n.path, n.topology, NodeState.whole(held[gang.gpus:]),
                            n.network)


def _take(nodes: list[GangNode], plan: GangPlan) -> None:
    for p in plan.pods:
        n = nodes[p.node]
        nodes[p.node] = GangNode(n.name, n.path, n.topology, n.state.with_allocation(p.decision),
                                 n.network)


def _victim_order(g: ManagedGang) -> tuple[int, float, float, str]:
    """Which running gang of lower priority goes first: the lowest priority, then the most
    recently admitted (Kueue's ``CandidatesOrdering``; to the millisecond, so two gangs created
    in the same second are still told apart), then the youngest by creation."""
    admitted = g.admitted_s if g.admitted_s is not None else g.created_s
    return (g.priority, -admitted, -g.created_s, g.key)


def decide(gangs: Sequence[ManagedGang], nodes: Sequence[GangNode], hierarchy: Hierarchy,
           pods: Sequence[Mapping[str, Any]], *, chooser: str = "gputopo",
           evaluator: Evaluator | None = None,
           first_seen: Mapping[str, int] | None = None, now_s: float | None = None,
           postpone_max_s: float = POSTPONE_MAX_S) -> Admission:
    """Admit, preempt or keep waiting (module docstring). ``nodes`` already count every GPU in
    use or promised; stopping gangs' GPUs count as free for deciding whether to preempt (they
    are on their way out), never for admitting.

    With the ``gputopo`` chooser and ``now_s`` (Unix seconds), a gang of one bandwidth-sensitive
    multi-GPU pod never postponed, or first postponed (``ManagedGang.postponed_s``) less than
    ``postpone_max_s`` seconds ago, is admitted only where the default policy's bounded
    postponement lets it start (module docstring, "Postponement"): a gang the cluster could
    hold now but only on poor GPU sets keeps waiting (``Admission.postponed`` says since when),
    and preempts nothing for a better set.

    ``first_seen`` (Job UID → rank) orders waiting gangs of one priority and creation second:
    the order the caller's watch first delivered them (the API's creation order). Gangs it does
    not rank come after those it does, then by ``namespace/name``."""
    ev = evaluator or Evaluator()
    choose_fn = CHOOSERS[chooser]
    out = Admission()
    current = list(nodes)
    index = {n.name: i for i, n in enumerate(current)}
    running = [g for g in gangs if g.running and not g.error]
    stopping = [g for g in gangs if g.stopping]
    seen = first_seen or {}
    waiting = sorted((g for g in gangs if g.waiting),
                     key=lambda g: (-g.priority, g.created_s, seen.get(g.uid, math.inf), g.key))
    preempted: set[str] = set()
    for g in waiting:
        if g.error:
            out.invalid.append(g)
            continue
        patient: Gang | None = None
        try:
            gang = g.gang()
            if chooser == "gputopo" and now_s is not None:
                waited = 0.0 if g.postponed_s is None else now_s - g.postponed_s
                patient = with_postponement(gang, waited, postpone_max_s)
            plan = choose_fn(current, hierarchy, patient or gang, evaluator=ev)
        except (RequestError, HierarchyError) as exc:
            out.invalid.append(ManagedGang(**{**g.__dict__, "error": str(exc)}))
            continue
        except GangNoFit as exc:
            if patient is not None and exc.postponed:  # it would start now without the wait
                since = out.postponed[g.uid] = g.postponed_s if g.postponed_s is not None \
                    else (now_s or 0.0)
                left = postpone_max_s - (now_s or 0.0) + since
                out.waiting.append((g, f"waiting for a better GPU set (at most {left:.0f} s "
                                       f"more): {exc}"))
                continue
            why = str(exc)
        else:
            out.admit.append((g, plan))
            _take(current, plan)
            continue
        # would it fit once the gangs already stopping are gone? then wait for them
        soon = list(current)
        for s in stopping:
            _free(soon, index, s, pods)
        if _fits(choose_fn, soon, hierarchy, gang, ev):
            out.waiting.append((g, f"{why}; waiting for preempted gangs to leave"))
            continue
        victims: list[ManagedGang] = []
        trial = list(soon)
        for v in sorted((r for r in running if r.priority < g.priority
                         and r.uid not in preempted),
                        key=_victim_order):
            _free(trial, index, v, pods)
            victims.append(v)
            if _fits(choose_fn, trial, hierarchy, gang, ev):
                break
        else:
            victims = []
        if victims:
            for v in victims:
                preempted.add(v.uid)
                out.preempt.append((v, g))
            out.waiting.append((g, f"{why}; preempting {', '.join(v.key for v in victims)}"))
        else:
            out.waiting.append((g, why))
    for g, _ in out.waiting:  # a clock once started runs on while the gang waits
        if g.postponed_s is not None:
            out.postponed.setdefault(g.uid, g.postponed_s)
    return out


def _fits(choose_fn: Any, nodes: Sequence[GangNode], hierarchy: Hierarchy, gang: Gang,
          ev: Evaluator) -> bool:
    try:
        choose_fn(nodes, hierarchy, gang, evaluator=ev)
    except GangNoFit:
        return False
    return True


# ------------------------------------------------------------------------------ patches

def admission_patch(obj: Mapping[str, Any], nodes: Sequence[str]) -> list[dict[str, Any]]:
    """JSON Patch that admits a suspended gang on ``nodes`` (the node of completion index
    0, 1, …): ``gputopo.io/planned-nodes`` and the queue label on the pod template, a required
    node affinity ``kubernetes.io/hostname In <nodes>`` (AND-ed into every existing node
    selector term; an earlier hostname expression is replaced), ``spec.suspend: false``.
    Starts with a ``test`` of the resourceVersion."""
    meta = _meta(obj)
    spec: Mapping[str, Any] = obj.get("spec") or {}
    template: Mapping[str, Any] = spec.get("template") or {}
    tmeta = _meta(template)
    tspec: Mapping[str, Any] = template.get("spec") or {}
    annotations = {**(tmeta.get("annotations") or {}),
                   ANN_PLANNED_NODES: format_planned_nodes(nodes)}
    labels = dict(tmeta.get("labels") or {})
    queue = (meta.get("labels") or {}).get(LABEL_QUEUE)
    if queue:
        labels[LABEL_QUEUE] = str(queue)
    ours = {"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(set(nodes))}
    affinity = json.loads(json.dumps(tspec.get("affinity") or {}))
    node_aff = affinity.setdefault("nodeAffinity", {})
    required = node_aff.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") != HOSTNAME_LABEL]
        term["matchExpressions"] = [*exprs, ours]
    required["nodeSelectorTerms"] = terms
    return [
        {"op": "test", "path": "/metadata/resourceVersion",
         "value": str(meta.get("resourceVersion", ""))},
        {"op": "add", "path": "/spec/template/metadata",
         "value": {**tmeta, "annotations": annotations, "labels": labels}},
        {"op": "add", "path": "/spec/template/spec/affinity", "value": affinity},
        {"op": "replace" if "suspend" in spec else "add", "path": "/spec/suspend",
         "value": False},
    ]


def gang_status(state: str, *, decided_s: float, reason: str,
                plan: GangPlan | None = None, nodes: Sequence[str] = (),
                postponed_s: float | None = None) -> str:
    """The ``gputopo.io/plan`` annotation of a gang: state, nodes, the domain, the predicted
    bottleneck, why, and (``postponedAt``) when its postponement began."""
    doc: dict[str, Any] = {"state": state, "decidedAt": format_time(decided_s),
                           "reason": reason}
    if postponed_s is not None:
        doc["postponedAt"] = format_time(postponed_s)
    if nodes:
        doc["nodes"] = list(nodes)
    if plan is not None:
        b = plan.bottleneck_gbps
        doc["predictedBottleneckGBps"] = round(b, 2) if math.isfinite(b) else None
        doc["interNode"] = plan.inter.over
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)

