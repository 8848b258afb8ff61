"""The planner on the local control plane: Jobs that train for a while, run by the real Job
controller and kwok, planned by the real ``gputopo planner``.

Pieces (used by ``tests/e2e/test_planner.py``):

* :func:`job_stages`: kwok's stages with a ``pod-complete`` stage that finishes a Job's pod
  after the duration in its ``kwok.gputopo.io/run-duration`` annotation (kwok's
  ``delay.durationFrom`` with a JSONPath-like expression), and leaves pods without it running;
* :class:`PlannerProcess`: ``gputopo planner`` as a child process (stopped by PID);
* :class:`TrainingEmulator`: what the training program inside a pod (and its epoch-reporting
  sidecar) would do — a pod that starts sets its run duration (remaining epochs × the true time
  per epoch on its GPUs) so that kwok completes it then, and the Job's
  ``gputopo.io/epochs-done`` advances as epochs finish; a pod deleted by a suspension keeps
  the epochs it finished (the snapshot);
* :func:`job_manifest`: a suspended, opted-in batch/v1 Job for a
  :class:`simulator.planning_workloads.PlanningJob`, times divided by a scale factor;
* :func:`gang_manifest`: a suspended, opted-in gang (an Indexed Job of several pods).
"""

from __future__ import annotations

import atexit
import json
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from localcluster.controlplane import ControlPlane, ControlPlaneError, free_port
from localcluster.gpucluster import SCHEDULER_NAME, gputopo_command
from localcluster.process import ChildProcess, ManagedProcess
from topology.contract import (
    ANN_DUE_DATE,
    ANN_EPOCH_TIME,
    ANN_EPOCHS,
    ANN_EPOCHS_DONE,
    ANN_JOB_PROFILE,
    ANN_PRIORITY,
    ANN_TARDINESS_WEIGHT,
    LABEL_QUEUE,
    RESOURCE_GPU,
)
from topology.planning.profiles import Config, config_key

#: The fake kubelet's run time of a pod (a Go duration, e.g. ``"93.5s"``).
ANN_RUN_DURATION = "kwok.gputopo.io/run-duration"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


def job_stages(default_stages: Path, out: Path) -> Path:
    """Write kwok's default stages with ``pod-complete`` replaced: a Running pod of a Job
    completes :data:`ANN_RUN_DURATION` after that annotation appears (no annotation: it keeps
    running). Returns ``out``.

    Raises:
        ControlPlaneError: the default stages have no ``pod-complete`` stage.
    """
    docs = [d for d in yaml.safe_load_all(default_stages.read_text()) if d]
    stage = next((d for d in docs if (d.get("metadata") or {}).get("name") == "pod-complete"),
                 None)
    if stage is None:
        raise ControlPlaneError(f"no pod-complete stage in {default_stages}")
    path = f'.metadata.annotations["{ANN_RUN_DURATION}"]'
    spec = stage["spec"]
    spec["selector"]["matchExpressions"].append({"key": path, "operator": "Exists"})
    spec["delay"] = {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": path}}
    spec.pop("weightFrom", None)
    out.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return out


class PlannerProcess(ChildProcess):
    """``gputopo planner`` as a child process (settings by flags only); its PID, crash, stop
    and log are :class:`~localcluster.process.ChildProcess`'s.

    Args:
        kubeconfig: what it authenticates with.
        log_path: its log.
        profiles_file: the profile document.
        interval_s: periodic rescheduling interval.
        extra_args: more flags.
    """

    def __init__(self, kubeconfig: Path, log_path: Path, profiles_file: Path, *,
                 interval_s: float, extra_args: list[str] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.profiles_file = profiles_file
        self.interval_s = interval_s
        self.metrics_port = free_port()
        self.extra_args = extra_args or []

    def start(self) -> PlannerProcess:
        """Start it and wait until its metrics endpoint answers.

        Raises:
            ControlPlaneError: it exited, or did not serve metrics within 60 s.
        """
        import os
        import urllib.request

        args = [*gputopo_command(), "planner", "--kubeconfig", str(self.kubeconfig),
                "--profiles-file", str(self.profiles_file), "--interval", str(self.interval_s),
                "--metrics-port", str(self.metrics_port), "--lease-namespace", "gputopo-system",
                "--log-level", "debug", *self.extra_args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_PLANNER_")}
        proc = ManagedProcess("gputopo-planner", args, self.log_path, env=env)
        self.process = proc.start()
        atexit.register(self.stop)
        deadline = time.monotonic() + 60
        while True:
            if proc.exited():
                raise ControlPlaneError(f"gputopo planner exited; log:\n{proc.log_tail()}")
            try:
                with urllib.request.urlopen(self.metrics_url, timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"gputopo planner serves no metrics; log:\n"
                                        f"{proc.log_tail()}")
            time.sleep(0.2)

    @property
    def metrics_url(self) -> str:
        """Its Prometheus endpoint."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def metrics(self) -> str:
        """The exposition text it serves now."""
        import urllib.request

        with urllib.request.urlopen(self.metrics_url, timeout=5) as resp:
            return str(resp.read().decode())


def job_manifest(name: str, *, due_s: float, weight: float, epochs: int, profile: str | None,
                 epoch_time_s: Mapping[Config, float] | None = None, queue: str = "default",
                 namespace: str = "default") -> dict[str, Any]:
    """A suspended, opted-in Job training ``epochs`` epochs (1 GPU until the planner sizes it),
    scheduled by gputopo's scheduler.

    Args:
        due_s: due date, Unix seconds (written RFC 3339).
        weight: ω, EUR per hour late.
        profile: profile key, or None (then ``epoch_time_s`` is required).
        epoch_time_s: inline per-epoch times.
    """
    from datetime import UTC, datetime

    due = datetime.fromtimestamp(due_s, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")
    ann = {ANN_DUE_DATE: due, ANN_TARDINESS_WEIGHT: f"{weight:g}", ANN_EPOCHS: str(epochs)}
    if profile:
        ann[ANN_JOB_PROFILE] = profile
    if epoch_time_s:
        ann[ANN_EPOCH_TIME] = json.dumps({config_key(c): t for c, t in epoch_time_s.items()})
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_QUEUE: queue},
                     "annotations": ann},
        "spec": {
            "suspend": True, "backoffLimit": 0, "completions": 1, "parallelism": 1,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "schedulerName": SCHEDULER_NAME, "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"limits": {RESOURCE_GPU: "1"}}}],
                },
            },
        },
    }


def gang_manifest(name: str, *, pods: int, gpus: int, priority: int = 0,
                  annotations: Mapping[str, str] | None = None, queue: str = "default",
                  namespace: str = "default") -> dict[str, Any]:
    """A suspended, opted-in gang: an Indexed Job of ``pods`` pods (parallelism = completions)
    asking for ``gpus`` GPUs each, ``gputopo.io/priority`` = ``priority``, scheduled by
    gputopo's scheduler; its pods run until deleted (no ``kwok.gputopo.io/run-duration``)."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_QUEUE: queue},
                     "annotations": {ANN_PRIORITY: str(priority), **(annotations or {})}},
        "spec": {
            "suspend": True, "backoffLimit": 0, "completionMode": "Indexed",
            "completions": pods, "parallelism": pods,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "schedulerName": SCHEDULER_NAME, "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"limits": {RESOURCE_GPU: str(gpus)}}}],
                },
            },
        },
    }


@dataclass
class _Run:
    pod: str
    job: str
    start_s: float
    epochs_at_start: int
    per_epoch_s: float
    node: str
    gpus: int
    end_s: float | None = None


@dataclass
class TrainingEmulator:
    """The training programs of the Jobs (module docstring), driven by pod and Job watches.

    Args:
        cp: the control plane.
        truth: per Job name, its true seconds per epoch by (GPU model key, GPUs) — what the
            hardware would do (the planner knows only the profiles).
        epochs: per Job name, its total epochs.
        models: node name → GPU model key.
        namespace: the Jobs' namespace.
        report_every_s: at most one ``epochs-done`` update per Job this often.
    """

    cp: ControlPlane
    truth: dict[str, dict[Config, float]]
    epochs: dict[str, int]
    models: dict[str, str]
    namespace: str = "default"
    report_every_s: float = 1.0
    runs: dict[str, _Run] = field(default_factory=dict)  # pod uid -> run
    done: dict[str, int] = field(default_factory=dict)  # job -> epochs at the last report
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> TrainingEmulator:
        """Start the watch and the reporter threads."""
        for target in (self._watch_pods, self._report):
            t = threading.Thread(target=target, daemon=True, name=f"emulator-{target.__name__}")
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        """Stop the threads."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)

    def _core(self) -> k8s_client.CoreV1Api:
        return self.cp.core_v1()

    def _job_epochs_done(self, job: str) -> int:
        batch = k8s_client.BatchV1Api(self.cp.api_client())
        obj = batch.read_namespaced_job(job, self.namespace)
        ann = (obj.metadata.annotations if obj.metadata else None) or {}
        return int(ann.get(ANN_EPOCHS_DONE, "0") or 0)

    def _on_pod(self, pod: Any) -> None:
        meta, spec, status = pod.metadata, pod.spec, pod.status
        uid = meta.uid
        job = (meta.labels or {}).get("job-name") or (meta.labels or {}).get(
            "batch.kubernetes.io/job-name")
        if not job or job not in self.truth:
            return
        with self._lock:
            run = self.runs.get(uid)
        if run is None and status.phase == "Running" and status.start_time and spec.node_name:
            gpus = int((spec.containers[0].resources.limits or {}).get(RESOURCE_GPU, "0"))
            model = self.models[spec.node_name]
            per = self.truth[job].get((model, gpus))
            if per is None:
                self.errors.append(f"{job}: no true epoch time for {model}:{gpus}")
                return
            start = status.start_time.timestamp()
            with self._lock:
                done = max(self._job_epochs_done(job), self.done.get(job, 0))
            run = _Run(meta.name, job, start, done, per, spec.node_name, gpus)
            left = (self.epochs[job] - done) * per - max(0.0, time.time() - start)
            with self._lock:
                self.runs[uid] = run
                self.done.setdefault(job, done)
            try:
                self._core().patch_namespaced_pod(
                    meta.name, self.namespace,
                    {"metadata": {"annotations": {ANN_RUN_DURATION: f"{max(left, 0.001):.3f}s"}}})
            except ApiException as exc:
                self.errors.append(f"{meta.name}: run duration not set: {exc.reason}")
        elif run is not None and run.end_s is None and (
                meta.deletion_timestamp is not None or status.phase in ("Succeeded", "Failed")):
            now = time.time()
            with self._lock:
                run.end_s = now
                epochs = self.epochs_now(run, now)
            self._set_done(job, epochs)  # the snapshot a restart resumes from

    def _watch_pods(self) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(self._core().list_namespaced_pod, self.namespace,
                                      timeout_seconds=5):
                    self._on_pod(event["object"])
                    if self._stop.is_set():
                        break
            except Exception as exc:  # noqa: BLE001 - keep emulating
                self.errors.append(f"pod watch: {exc}")
                time.sleep(0.5)
            finally:
                w.stop()

    def epochs_now(self, run: _Run, now: float) -> int:
        """Epochs the Job has finished by ``now`` during ``run``."""
        end = run.end_s if run.end_s is not None else now
        ran = max(0.0, min(end, now) - run.start_s)
        return min(self.epochs[run.job], run.epochs_at_start + math.floor(ran / run.per_epoch_s))

    def _report(self) -> None:
        batch = k8s_client.BatchV1Api(self.cp.api_client())
        while not self._stop.wait(self.report_every_s):
            now = time.time()
            with self._lock:
                latest: dict[str, int] = {}
                for run in self.runs.values():
                    latest[run.job] = max(latest.get(run.job, 0), self.epochs_now(run, now))
            for job, epochs in latest.items():
                self._set_done(job, epochs, batch)

    def _set_done(self, job: str, epochs: int, batch: k8s_client.BatchV1Api | None = None) -> None:
        with self._lock:
            if epochs <= self.done.get(job, 0):
                return
            self.done[job] = epochs
        api = batch or k8s_client.BatchV1Api(self.cp.api_client())
        try:
            api.patch_namespaced_job(job, self.namespace, {"metadata": {
                "annotations": {ANN_EPOCHS_DONE: str(epochs)}}})
        except ApiException as exc:
            self.errors.append(f"{job}: epochs-done not reported: {exc.reason}")
