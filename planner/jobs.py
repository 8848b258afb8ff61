"""batch/v1 Jobs the planner manages, as plain data — pure: no Kubernetes client, no clock.

A Job opts in with the label ``gputopo.io/queue`` and is created with ``spec.suspend: true``
(the planner resumes it). Its annotations (names: :mod:`topology.contract`):

========================================  ===================================================
``gputopo.io/due-date``                   d_j, RFC 3339 (``2026-05-01T18:00:00Z``); required
``gputopo.io/tardiness-weight``           ω_j, EUR per hour late (> 0); required
``gputopo.io/epochs``                     epochs to train (≥ 1); required
``gputopo.io/job-profile``                key of its profile in the profiles document
``gputopo.io/epoch-time-s``               JSON ``{"<gpu_model>:<gpus>": seconds}`` (overrides
                                          the profile's entries)
``gputopo.io/epochs-done``                epochs finished, updated by the job or a sidecar
========================================  ===================================================

The planner writes ``gputopo.io/plan`` (JSON: the planned node, GPUs, predicted finish and
costs) and, to act, patches the Job (:func:`resume_patch`, :func:`suspend_patch`): on resume,
``spec.suspend: false``, the pod template's node selector ``kubernetes.io/hostname`` and
``gputopo.io/planned-node`` annotation (the extender keeps the pod on that node), the GPU
container's ``nvidia.com/gpu`` request and limit, and the ``gputopo.io/queue`` label on the pod
template (so the planner finds the pods). Kubernetes allows these changes on a suspended Job:
scheduling directives (KEP-2926, GA in 1.27) and pod resources (KEP-5440, beta and on by default
in 1.36) — the control plane must be 1.36 or later.

Objects are the JSON form of the API (camelCase keys), as the API server returns them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from topology.contract import (
    ANN_DUE_DATE,
    ANN_EPOCH_TIME,
    ANN_EPOCHS,
    ANN_EPOCHS_DONE,
    ANN_JOB_PROFILE,
    ANN_PLAN,
    ANN_PLANNED_NODE,
    ANN_TARDINESS_WEIGHT,
    LABEL_QUEUE,
    RESOURCE_GPU,
)
from topology.planning.profiles import Config, ProfileError, _epoch_table

HOSTNAME_LABEL = "kubernetes.io/hostname"


class JobSpecError(ValueError):
    """A managed Job's annotations are missing or malformed; ``str(exc)`` says which."""


def parse_time(text: str) -> float:
    """RFC 3339 (``2026-05-01T18:00:00Z``, ``...+02:00``, fractional seconds allowed) → Unix
    seconds.

    Raises:
        JobSpecError: not RFC 3339 with a time zone.
    """
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise JobSpecError(f"{text!r} is not an RFC 3339 time") from None
    if value.tzinfo is None:
        raise JobSpecError(f"{text!r} has no time zone (RFC 3339 needs one, e.g. Z)")
    return value.timestamp()


def format_time(seconds: float) -> str:
    """Unix seconds → RFC 3339 in UTC with millisecond precision."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


class JobLifecycle:
    """Where a planner-managed Job (one pod, :class:`ManagedJob`, or a gang,
    :class:`planner.gang.ManagedGang`) stands, from its suspension and its pods' counts."""

    namespace: str
    name: str
    suspended: bool
    active: int
    started: bool
    finished: bool

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def running(self) -> bool:
        """Resumed by the planner (its pods run or are being scheduled) and not finished."""
        return not self.finished and not self.suspended

    @property
    def stopping(self) -> bool:
        """Suspended, but its pods are still going or its template is not mutable yet."""
        return not self.finished and self.suspended and (self.active > 0 or self.started)

    @property
    def waiting(self) -> bool:
        """Suspended with no pods: holds nothing; the planner may start it."""
        return not self.finished and self.suspended and self.active == 0 and not self.started


@dataclass(frozen=True)
class ManagedJob(JobLifecycle):
    """What the planner reads from one managed Job.

    Attributes:
        namespace, name, uid: identity.
        queue: the ``gputopo.io/queue`` label value.
        resource_version: for optimistic concurrency in patches.
        due_s: due date, Unix seconds.
        weight: ω, EUR per hour late.
        epochs: total epochs.
        epochs_done: finished epochs (0 when not reported).
        profile: the profile key, or None.
        epoch_time_s: inline per-epoch times (override the profile's).
        suspended: ``spec.suspend``.
        active: pods the Job controller counts as active.
        started: ``status.startTime`` is set (the Job controller clears it once a suspended Job
            has no pods left: its pod template is mutable again).
        finished: a Complete or Failed condition is true.
        succeeded: the Complete condition is true.
        node: the node its pod template is pinned to (``kubernetes.io/hostname`` selector).
        gpus: ``nvidia.com/gpu`` of its GPU container (limit, else request; 0 when none).
        container: index of the GPU container in the pod template.
        created_s: creation time, Unix seconds.
        finished_s: completion time, Unix seconds (None while unfinished).
        error: why the Job cannot be planned ("" when it can).
    """

    namespace: str
    name: str
    uid: str
    queue: str
    resource_version: str
    due_s: float
    weight: float
    epochs: int
    epochs_done: int
    profile: str | None
    epoch_time_s: dict[Config, float] = field(default_factory=dict)
    suspended: bool = True
    active: int = 0
    started: bool = False
    finished: bool = False
    succeeded: bool = False
    node: str | None = None
    gpus: int = 0
    container: int = 0
    created_s: float = 0.0
    finished_s: float | None = None
    error: str = ""

    @property
    def remaining_epochs(self) -> int:
        """Epochs left after a restart from the last snapshot: total − done (≥ 0)."""
        return max(0, self.epochs - self.epochs_done)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _gpu_count(container: Mapping[str, Any]) -> int:
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (res.get(part) or {}).get(RESOURCE_GPU)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return 0
    return 0


def gpu_container(template_spec: Mapping[str, Any]) -> int:
    """Index of the container that gets the GPUs: the first that asks for ``nvidia.com/gpu``,
    else the first container."""
    containers = template_spec.get("containers") or []
    for i, c in enumerate(containers):
        if _gpu_count(c):
            return i
    return 0


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in status.get("conditions") or []
            if isinstance(c, Mapping) and str(c.get("status")) == "True"}


def parse_job(obj: Mapping[str, Any]) -> ManagedJob:
    """A Job (API JSON) as a :class:`ManagedJob`. Malformed annotations do not raise: the
    result carries ``error`` (the planner reports it in an Event and leaves the Job alone).
    """
    meta = _meta(obj)
    ann: Mapping[str, str] = meta.get("annotations") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    spec: Mapping[str, Any] = obj.get("spec") or {}
    status: Mapping[str, Any] = obj.get("status") or {}
    template = spec.get("template") or {}
    tspec: Mapping[str, Any] = template.get("spec") or {}
    idx = gpu_container(tspec)
    containers = tspec.get("containers") or [{}]
    conds = _conditions(status)
    finished = "Complete" in conds or "Failed" in conds
    finished_s = None
    if "Complete" in conds and status.get("completionTime"):
        finished_s = _time_or_none(str(status["completionTime"]))
    elif finished:
        when = (conds.get("Complete") or conds.get("Failed") or {}).get("lastTransitionTime")
        finished_s = _time_or_none(str(when)) if when else None
    selector: Mapping[str, str] = tspec.get("nodeSelector") or {}
    base = dict(
        namespace=str(meta.get("namespace", "default")), name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")), queue=str(labels.get(LABEL_QUEUE, "")),
        resource_version=str(meta.get("resourceVersion", "")),
        suspended=bool(spec.get("suspend", False)), active=int(status.get("active") or 0),
        started=status.get("startTime") is not None, finished=finished,
        succeeded="Complete" in conds, node=selector.get(HOSTNAME_LABEL),
        gpus=_gpu_count(containers[idx]) if idx < len(containers) else 0, container=idx,
        created_s=_time_or_none(str(meta.get("creationTimestamp", ""))) or 0.0,
        finished_s=finished_s,
    )
    try:
        due = parse_time(_required(ann, ANN_DUE_DATE))
        weight = _number(_required(ann, ANN_TARDINESS_WEIGHT), ANN_TARDINESS_WEIGHT)
        if weight <= 0:
            raise JobSpecError(f"{ANN_TARDINESS_WEIGHT} must be > 0 (EUR per hour late)")
        epochs = _whole(_required(ann, ANN_EPOCHS), ANN_EPOCHS, minimum=1)
        done = _whole(ann.get(ANN_EPOCHS_DONE, "0") or "0", ANN_EPOCHS_DONE, minimum=0)
        table: dict[Config, float] = {}
        if ann.get(ANN_EPOCH_TIME):
            try:
                table = _epoch_table(json.loads(ann[ANN_EPOCH_TIME]))
            except (json.JSONDecodeError, ValueError, ProfileError) as exc:
                raise JobSpecError(f"{ANN_EPOCH_TIME}: {exc}") from None
        profile = ann.get(ANN_JOB_PROFILE) or None
        if profile is None and not table:
            raise JobSpecError(f"needs {ANN_JOB_PROFILE} (a profile key) or {ANN_EPOCH_TIME}")
    except JobSpecError as exc:
        return ManagedJob(due_s=math.inf, weight=1.0, epochs=1, epochs_done=0, profile=None,
                          error=str(exc), **base)  # type: ignore[arg-type]
    return ManagedJob(due_s=due, weight=weight, epochs=epochs, epochs_done=min(done, epochs),
                      profile=profile, epoch_time_s=table, **base)  # type: ignore[arg-type]


def _time_or_none(text: str) -> float | None:
    try:
        return parse_time(text) if text else None
    except JobSpecError:
        return None


def _required(ann: Mapping[str, str], key: str) -> str:
    value = ann.get(key)
    if value is None or not str(value).strip():
        raise JobSpecError(f"missing annotation {key}")
    return str(value)


def _number(text: str, key: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise JobSpecError(f"{key}={text!r} is not a number") from None
    if not math.isfinite(value):
        raise JobSpecError(f"{key} must be finite")
    return value


def _whole(text: str, key: str, *, minimum: int) -> int:
    value = _number(text, key)
    if value != int(value) or value < minimum:
        raise JobSpecError(f"{key}={text!r} must be a whole number >= {minimum}")
    return int(value)


# ------------------------------------------------------------------------------ patches


def _escape(key: str) -> str:
    """JSON Pointer escaping (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def resume_patch(obj: Mapping[str, Any], node: str, gpus: int) -> list[dict[str, Any]]:
    """JSON Patch (RFC 6902) that resumes a suspended Job on ``gpus`` GPUs of ``node``: pins
    the pod template to the node (node selector and ``gputopo.io/planned-node``), sets the GPU
    container's ``nvidia.com/gpu`` request and limit, labels the template with the Job's queue
    and clears ``spec.suspend``. Starts with a ``test`` of the resourceVersion, so a Job that
    changed since it was read is not patched blindly.
    """
    meta = _meta(obj)
    spec: Mapping[str, Any] = obj.get("spec") or {}
    template: Mapping[str, Any] = spec.get("template") or {}
    tmeta: Mapping[str, Any] = template.get("metadata") or {}
    tspec: Mapping[str, Any] = template.get("spec") or {}
    idx = gpu_container(tspec)
    container: Mapping[str, Any] = (tspec.get("containers") or [{}])[idx]
    resources: Mapping[str, Any] = container.get("resources") or {}
    limits = dict(resources.get("limits") or {})
    requests = dict(resources.get("requests") or {})
    limits[RESOURCE_GPU] = str(gpus)
    if RESOURCE_GPU in requests or requests:
        requests[RESOURCE_GPU] = str(gpus)
    new_resources = {**resources, "limits": limits}
    if requests:
        new_resources["requests"] = requests
    selector = {**(tspec.get("nodeSelector") or {}), HOSTNAME_LABEL: node}
    annotations = {**(tmeta.get("annotations") or {}), ANN_PLANNED_NODE: node}
    labels = {**(tmeta.get("labels") or {})}
    queue = (meta.get("labels") or {}).get(LABEL_QUEUE)
    if queue:
        labels[LABEL_QUEUE] = str(queue)
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion",
         "value": str(meta.get("resourceVersion", ""))},
        {"op": "add", "path": "/spec/template/metadata",
         "value": {**tmeta, "annotations": annotations, "labels": labels}},
        {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": selector},
        {"op": "add", "path": f"/spec/template/spec/containers/{idx}/resources",
         "value": new_resources},
        {"op": "replace" if "suspend" in spec else "add", "path": "/spec/suspend",
         "value": False},
    ]
    return ops


def suspend_patch(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON Patch that suspends a running Job (the Job controller deletes its pods)."""
    meta = _meta(obj)
    return [{"op": "test", "path": "/metadata/resourceVersion",
             "value": str(meta.get("resourceVersion", ""))},
            {"op": "replace", "path": "/spec/suspend", "value": True}]


def annotation_patch(obj: Mapping[str, Any], values: Mapping[str, str]) -> list[dict[str, Any]]:
    """JSON Patch that sets Job annotations (creating the map when the Job has none)."""
    meta = _meta(obj)
    if not meta.get("annotations"):
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(values)}]
    return [{"op": "add", "path": f"/metadata/annotations/{_escape(k)}", "value": v}
            for k, v in values.items()]


def plan_status(node: str | None, gpus: int | None, *, decided_s: float,
                predicted_finish_s: float | None, energy_cost_eur: float | None,
                tardiness_s: float | None, objective_eur: float, reason: str,
                state: str) -> str:
    """The ``gputopo.io/plan`` annotation: compact JSON with the planned configuration, the
    predicted finish and costs, and why."""
    doc: dict[str, Any] = {"state": state, "decidedAt": format_time(decided_s),
                           "reason": reason, "objectiveEUR": round(objective_eur, 6)}
    if node is not None:
        doc.update(node=node, gpus=gpus)
    if predicted_finish_s is not None:
        doc["predictedFinish"] = format_time(predicted_finish_s)
    if energy_cost_eur is not None:
        doc["predictedEnergyCostEUR"] = round(energy_cost_eur, 6)
    if tardiness_s is not None:
        doc["predictedTardinessS"] = round(tardiness_s, 1)
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def plan_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``gputopo.io/plan`` annotation of a Job, parsed (None when absent or garbled)."""
    text = (_meta(obj).get("annotations") or {}).get(ANN_PLAN)
    try:
        doc = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def managed(objs: Sequence[Mapping[str, Any]]) -> list[ManagedJob]:
    """The Jobs that opted in (label ``gputopo.io/queue``), parsed."""
    return [parse_job(o) for o in objs if LABEL_QUEUE in (_meta(o).get("labels") or {})]
