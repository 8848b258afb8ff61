"""The cluster as the planner sees it — GPU nodes, the GPUs other pods hold, and what the
pods of managed Jobs actually ran — pure: API JSON in, plain data out.

* A **GPU node** is a Ready, schedulable Node with GPUs: its GPU model comes from its topology
  annotation (``gputopo.io/topology``, what the device plugin publishes) or, failing that, the
  ``gputopo.io/gpu-model`` label; its GPU count from ``status.allocatable["nvidia.com/gpu"]``
  (else the topology's size).
* **Held GPUs**: GPUs requested by pods on the node that are not terminal and do not belong to
  a running managed Job — other workloads, and the pods of Jobs the planner has suspended that
  have not gone yet. The planner plans only with the rest.
* **Run intervals**: when each pod of a managed Job ran (``status.startTime`` to its
  container's ``finishedAt``, or to its deletion), for the actual energy cost
  (:class:`EnergyLedger`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.jobs import ManagedJob, parse_time
from topology.contract import ANN_TOPOLOGY, LABEL_GPU_MODEL, RESOURCE_GPU
from topology.model import TopologyError
from topology.planning.energy import EnergyError, gpu_model_key
from topology.serialization import loads

CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


@dataclass(frozen=True)
class GpuNode:
    """A node the planner may use: name, GPU model key, GPU count."""

    name: str
    gpu_model: str
    gpus: int


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def parse_node(obj: Mapping[str, Any]) -> GpuNode | None:
    """The node as a :class:`GpuNode`, or None when it is not a usable GPU node (not Ready,
    cordoned, no GPUs, or no known GPU model)."""
    meta = _meta(obj)
    spec: Mapping[str, Any] = obj.get("spec") or {}
    status: Mapping[str, Any] = obj.get("status") or {}
    if spec.get("unschedulable"):
        return None
    ready = any(c.get("type") == "Ready" and str(c.get("status")) == "True"
                for c in status.get("conditions") or [] if isinstance(c, Mapping))
    if not ready:
        return None
    model = None
    size = 0
    text = (meta.get("annotations") or {}).get(ANN_TOPOLOGY)
    if text:
        try:
            topo = loads(text)
            model, size = topo.gpus[0].name, topo.size
        except (TopologyError, ValueError):
            model = None
    if model is None:
        model = (meta.get("labels") or {}).get(LABEL_GPU_MODEL)
    gpus = _quantity((status.get("allocatable") or {}).get(RESOURCE_GPU)) or size
    if not model or gpus < 1:
        return None
    try:
        key = gpu_model_key(str(model))
    except EnergyError:
        return None
    return GpuNode(str(meta.get("name", "")), key, gpus)


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """``nvidia.com/gpu`` the pod asks for (limits, else requests; summed over containers)."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(RESOURCE_GPU)
        if value is None:
            value = (res.get("requests") or {}).get(RESOURCE_GPU)
        total += _quantity(value)
    return total


def pod_terminal(pod: Mapping[str, Any]) -> bool:
    """The pod has finished (Succeeded or Failed): its GPUs are free."""
    return str((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed")


def held_gpus(pods: Iterable[Mapping[str, Any]], running_jobs: set[str]) -> dict[str, int]:
    """GPUs per node held by pods the plan does not account for: non-terminal pods bound to a
    node that do not belong to a running managed Job (``running_jobs``: their UIDs)."""
    out: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or pod_terminal(pod):
            continue
        uid = (_meta(pod).get("labels") or {}).get(CONTROLLER_UID_LABEL)
        if uid and uid in running_jobs:
            continue
        g = pod_gpus(pod)
        if g:
            out[str(node)] = out.get(str(node), 0) + g
    return out


def job_of(pod: Mapping[str, Any]) -> str | None:
    """The UID of the Job that owns the pod (its controller-uid label), or None."""
    value = (_meta(pod).get("labels") or {}).get(CONTROLLER_UID_LABEL)
    return str(value) if value else None


@dataclass
class RunInterval:
    """When one pod ran: node, GPUs, start, end (None while it runs), its Job's UID."""

    job_uid: str
    node: str
    gpus: int
    start_s: float
    end_s: float | None = None


def _finished_at(pod: Mapping[str, Any]) -> float | None:
    status = pod.get("status") or {}
    ends = []
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term.get("finishedAt"):
            ends.append(parse_time(str(term["finishedAt"])))
    return max(ends) if ends else None


def observe_pod(pod: Mapping[str, Any], known: RunInterval | None) -> RunInterval | None:
    """Update a pod's run interval from its current object: it starts at ``status.startTime``
    and ends at its containers' ``finishedAt`` (Succeeded/Failed) or its
    ``deletionTimestamp`` (stopped). None while it has not started."""
    status: Mapping[str, Any] = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    job = job_of(pod)
    if known is None:
        if not status.get("startTime") or not node or not job:
            return None
        known = RunInterval(job, str(node), pod_gpus(pod), parse_time(str(status["startTime"])))
    if known.end_s is None:
        end = _finished_at(pod) if pod_terminal(pod) else None
        deleted = _meta(pod).get("deletionTimestamp")
        if end is None and deleted:
            end = parse_time(str(deleted))
        if end is not None:
            known.end_s = max(end, known.start_s)
    return known


@dataclass
class EnergyLedger:
    """The planner's predicted run intervals and the pods' actual ones, per Job.

    * **predicted**: when the planner resumes a Job on (node, g) at t it predicts a run of
      t_jng seconds: [t, t + t_jng]; when it stops the Job early at t', the interval ends at t'.
    * **actual**: every pod's [startTime, finishedAt or deletion] (:func:`observe_pod`); a pod
      that vanished before its end was seen ends when the planner stopped its Job, or when it
      was last seen.
    """

    predicted: dict[str, list[list[Any]]] = field(default_factory=dict)  # uid -> [[node,g,s,e]]
    actual: dict[str, RunInterval] = field(default_factory=dict)  # pod uid -> interval
    last_seen: dict[str, float] = field(default_factory=dict)  # pod uid -> time

    def planned(self, job: ManagedJob | str, node: str, gpus: int, start_s: float,
                duration_s: float) -> None:
        """The planner resumed the Job."""
        uid = job if isinstance(job, str) else job.uid
        self.predicted.setdefault(uid, []).append([node, gpus, start_s, start_s + duration_s])

    def stopped(self, job: ManagedJob | str, at_s: float) -> None:
        """The planner suspended the Job at ``at_s``: its predicted interval ends there."""
        uid = job if isinstance(job, str) else job.uid
        for seg in self.predicted.get(uid, [])[-1:]:
            seg[3] = max(seg[2], min(seg[3], at_s))

    def see_pods(self, pods: Iterable[Mapping[str, Any]], now_s: float) -> None:
        """Update the actual intervals from the current pods of managed Jobs."""
        for pod in pods:
            uid = str(_meta(pod).get("uid", ""))
            if not uid:
                continue
            iv = observe_pod(pod, self.actual.get(uid))
            if iv is not None:
                self.actual[uid] = iv
                self.last_seen[uid] = now_s

    def vanished(self, present: set[str]) -> None:
        """Pods no longer listed: an open interval ends when the pod was last seen."""
        for uid, iv in self.actual.items():
            if iv.end_s is None and uid not in present:
                iv.end_s = max(iv.start_s, self.last_seen.get(uid, iv.start_s))

    def predicted_intervals(self) -> list[tuple[str, int, float, float]]:
        """(node, GPUs, start, end) of every predicted interval."""
        return [(str(n), int(g), float(s), float(e)) for segs in self.predicted.values()
                for n, g, s, e in segs]

    def actual_intervals(self, now_s: float) -> list[tuple[str, int, float, float]]:
        """(node, GPUs, start, end) of every pod run (open ones end at ``now_s``)."""
        return [(iv.node, iv.gpus, iv.start_s, iv.end_s if iv.end_s is not None else
                 max(now_s, iv.start_s)) for iv in self.actual.values()]
