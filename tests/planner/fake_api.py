"""An in-memory API for the planner's controller tests: Nodes, Jobs and Pods as API JSON,
JSON Patch applied as the API server does for the ops the planner sends (test, add, replace),
Events recorded."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from planner.kube import ApiError
from topology import catalog
from topology.contract import (
    ANN_DUE_DATE,
    ANN_EPOCHS,
    ANN_JOB_PROFILE,
    ANN_TARDINESS_WEIGHT,
    ANN_TOPOLOGY,
    LABEL_QUEUE,
)
from topology.serialization import dumps


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def apply_patch(obj: dict[str, Any], ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """RFC 6902 for test/add/replace (what the planner sends); raises ApiError(422) like the
    API server when a test fails or a path is missing."""
    out = copy.deepcopy(obj)
    for op in ops:
        parts = [_unescape(p) for p in str(op["path"]).split("/")[1:]]
        parent: Any = out
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.get(p)
            if parent is None:
                raise ApiError(f"path {op['path']} does not exist", 422)
        last = parts[-1]
        if op["op"] == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op["value"]:
                raise ApiError(f"test failed at {op['path']}", 422)
        elif op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                parent[int(last)] = copy.deepcopy(op["value"])
            else:
                if op["op"] == "replace" and last not in parent:
                    raise ApiError(f"replace of missing {op['path']}", 422)
                parent[last] = copy.deepcopy(op["value"])
        else:
            raise ApiError(f"unsupported op {op['op']}", 422)
    return out


def node(name: str, machine: str) -> dict[str, Any]:
    topo = catalog.get(machine)
    return {
        "metadata": {"name": name, "annotations": {ANN_TOPOLOGY: dumps(topo)},
                     "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "allocatable": {"nvidia.com/gpu": str(topo.size)}},
    }


def job(name: str, *, due: str, weight: float, epochs: int, profile: str = "convnet",
        done: int | None = None, uid: str | None = None, extra: dict[str, str] | None = None,
        created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    ann = {ANN_DUE_DATE: due, ANN_TARDINESS_WEIGHT: str(weight), ANN_EPOCHS: str(epochs),
           ANN_JOB_PROFILE: profile, **(extra or {})}
    if done is not None:
        ann["gputopo.io/epochs-done"] = str(done)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "uid": uid or f"uid-{name}",
                     "resourceVersion": "1", "labels": {LABEL_QUEUE: "default"},
                     "annotations": ann, "creationTimestamp": created},
        "spec": {"suspend": True, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"schedulerName": "gputopo-scheduler", "restartPolicy": "Never",
                     "containers": [{"name": "train", "image": "x", "resources": {
                         "limits": {"nvidia.com/gpu": "1"}}}]}}},
        "status": {},
    }


class FakeApi:
    """:class:`planner.kube.KubeApi` in memory."""

    def __init__(self, nodes: list[dict[str, Any]], profiles: str | None = None) -> None:
        self.nodes = nodes
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str, str]] = []  # job, reason, message, type
        self.patches: list[tuple[str, list[Mapping[str, Any]]]] = []
        self.configmaps: dict[tuple[str, str], dict[str, str]] = {}
        self.rv = 1
        if profiles is not None:
            self.configmaps[("gputopo-system", "profiles")] = {"profiles.yaml": profiles}

    def add_job(self, obj: dict[str, Any]) -> None:
        self.jobs[obj["metadata"]["name"]] = obj

    def list_nodes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.nodes)

    def list_jobs(self) -> tuple[list[dict[str, Any]], str]:
        return copy.deepcopy(list(self.jobs.values())), str(self.rv)

    def list_pods(self) -> list[dict[str, Any]]:
        return copy.deepcopy([p for p in self.pods.values()
                              if p["status"].get("phase") not in ("Succeeded", "Failed")])

    def list_job_pods(self) -> list[dict[str, Any]]:
        return copy.deepcopy([p for p in self.pods.values()
                              if "gputopo.io/queue" in p["metadata"]["labels"]])

    def patch_job(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None:
        self.patches.append((name, list(ops)))
        new = apply_patch(self.jobs[name], ops)
        self.rv += 1
        new["metadata"]["resourceVersion"] = str(self.rv)
        self.jobs[name] = new

    def event(self, job: Mapping[str, Any], reason: str, message: str,
              kind: str = "Normal") -> None:
        self.events.append((job["metadata"]["name"], reason, message, kind))

    def read_configmap(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.configmaps.get((namespace, name))

    # ------------------------------------------------------------------ the cluster's side
    def run_pod(self, job_name: str, started: str) -> dict[str, Any]:
        """What the Job controller, the scheduler and kwok do for a resumed Job: a Running
        pod on the pinned node."""
        j = self.jobs[job_name]
        tspec = j["spec"]["template"]["spec"]
        pod = {
            "metadata": {"name": f"{job_name}-pod{len(self.pods)}", "namespace": "ml",
                         "uid": f"pod-{job_name}-{len(self.pods)}",
                         "labels": {"batch.kubernetes.io/controller-uid": j["metadata"]["uid"],
                                    **j["spec"]["template"]["metadata"].get("labels", {})}},
            "spec": {"nodeName": tspec["nodeSelector"]["kubernetes.io/hostname"],
                     "containers": copy.deepcopy(tspec["containers"])},
            "status": {"phase": "Running", "startTime": started},
        }
        self.pods[pod["metadata"]["uid"]] = pod
        j["status"] = {"active": 1, "startTime": started}
        return pod

    def stop_pods(self, job_name: str, at: str) -> None:
        """The Job controller deleted the suspended Job's pods; kwok finalised them."""
        uid = self.jobs[job_name]["metadata"]["uid"]
        for key, pod in list(self.pods.items()):
            if pod["metadata"]["labels"].get("batch.kubernetes.io/controller-uid") == uid:
                del self.pods[key]
        self.jobs[job_name]["status"] = {}

    def finish(self, job_name: str, at: str) -> None:
        uid = self.jobs[job_name]["metadata"]["uid"]
        for pod in self.pods.values():
            if pod["metadata"]["labels"].get("batch.kubernetes.io/controller-uid") == uid:
                pod["status"]["phase"] = "Succeeded"
                pod["status"]["containerStatuses"] = [
                    {"state": {"terminated": {"finishedAt": at}}}]
        self.jobs[job_name]["status"] = {
            "succeeded": 1, "completionTime": at,
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": at}]}

    def plan_annotation(self, job_name: str) -> dict[str, Any]:
        text = self.jobs[job_name]["metadata"]["annotations"]["gputopo.io/plan"]
        return json.loads(text)  # type: ignore[no-any-return]
