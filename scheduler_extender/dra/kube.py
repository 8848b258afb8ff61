"""The DRA allocator's Kubernetes API calls — the only module of the allocator that talks to it.

:class:`DraKubeAPI` extends the extender's :class:`~scheduler_extender.kubernetes_state.
OfficialKubeAPI` (raw JSON dicts, no model deserialisation, every failure an
:class:`~scheduler_extender.kubernetes_state.ApiError`) with what the allocator reads — pods
not bound yet, ResourceClaims, gputopo's ResourceSlices, DeviceClasses — and the three writes
it makes:

* the claim's status (``status.allocation`` + ``status.reservedFor``), a JSON merge patch
  carrying the ``resourceVersion`` it was decided on: kube-apiserver refuses it with 409 when
  the claim changed meanwhile (``resourceclaims/status`` and the synthetic
  ``resourceclaims/binding`` permission, DRAResourceClaimGranularStatusAuthorization);
* a claim's finalizer (kube-scheduler's ``resource.kubernetes.io/delete-protection``), for
  claims no pod owns, so the resourceclaim controller deallocates them when their last
  consumer goes;
* the pod: one JSON patch removing gputopo's scheduling gate and adding the decision's
  annotations, tested against the pod's UID and the gate's position (a replaced or changed pod
  is refused, and read again from the watch).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from scheduler_extender.dra.claims import SCHEDULING_GATE
from scheduler_extender.kubernetes_state import (
    DEFAULT_BIND_CONCURRENCY,
    ApiError,
    OfficialKubeAPI,
    _as_api_error,
    _drain,
)
from topology.dra import DRIVER

#: Field selector of the pod list/watch: pods no scheduler has bound yet and that may still
#: run. A pod leaving it (bound, finished, deleted) arrives as DELETED.
PENDING_PODS = "spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed"


def release_ops(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> list[dict[str, Any]]:
    """The JSON patch removing :data:`SCHEDULING_GATE` from ``pod`` and adding
    ``annotations`` (:meth:`DraKubeAPI.release_pod`); no gate: only the annotations."""
    meta = pod.get("metadata") or {}
    gates = [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []]
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": meta.get("uid")}]
    if SCHEDULING_GATE in gates:
        i = gates.index(SCHEDULING_GATE)
        ops += [{"op": "test", "path": f"/spec/schedulingGates/{i}/name",
                 "value": SCHEDULING_GATE},
                {"op": "remove", "path": f"/spec/schedulingGates/{i}"}]
    if annotations and not meta.get("annotations"):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": dict(annotations)})
    else:
        for k, v in annotations.items():
            key = k.replace("~", "~0").replace("/", "~1")
            ops.append({"op": "add", "path": f"/metadata/annotations/{key}", "value": v})
    return ops


class DraKubeAPI(OfficialKubeAPI):
    """:class:`OfficialKubeAPI` plus ``resource.k8s.io/v1`` (raw JSON)."""

    def __init__(self, core: Any, resource: Any, resource_beta: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(core, **kwargs)
        self.resource = resource
        self.resource_beta = resource_beta

    @classmethod
    def from_config(
        cls, kubeconfig: str | Path | None = None, *,
        bind_connections: int = DEFAULT_BIND_CONCURRENCY,
    ) -> DraKubeAPI:
        """Client from a kubeconfig file (None: the in-cluster service account), with
        ``bind_connections`` keep-alive connections for the writes.

        Raises:
            ApiError: no usable configuration.
        """
        from kubernetes import client

        base = OfficialKubeAPI.from_config(kubeconfig, bind_connections=bind_connections)
        return cls(base.core, client.ResourceV1Api(base.core.api_client),
                   client.ResourceV1beta2Api(base.core.api_client))

    # ------------------------------------------------------------------ reads
    def list_pending_pods(self) -> tuple[list[dict[str, Any]], str]:
        """Pods not bound yet (all namespaces) and the list's resourceVersion."""
        return self._list(self.core.list_pod_for_all_namespaces, field_selector=PENDING_PODS)

    def watch_pending_pods(self, rv: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        """Watch events of pods not bound yet."""
        return self._watch(self.core.list_pod_for_all_namespaces, rv, timeout_s,
                           field_selector=PENDING_PODS)

    def list_claims(self) -> tuple[list[dict[str, Any]], str]:
        """Every ResourceClaim."""
        return self._list(self.resource.list_resource_claim_for_all_namespaces)

    def watch_claims(self, rv: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        """Watch ResourceClaims."""
        return self._watch(self.resource.list_resource_claim_for_all_namespaces, rv, timeout_s)

    def list_slices(self) -> tuple[list[dict[str, Any]], str]:
        """gputopo's ResourceSlices (``spec.driver`` = ``gpu.gputopo.io``)."""
        return self._list(self.resource.list_resource_slice, field_selector=f"spec.driver={DRIVER}")

    def watch_slices(self, rv: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        """Watch gputopo's ResourceSlices."""
        return self._watch(self.resource.list_resource_slice, rv, timeout_s,
                           field_selector=f"spec.driver={DRIVER}")

    def list_device_classes(self) -> tuple[list[dict[str, Any]], str]:
        """Every DeviceClass."""
        return self._list(self.resource.list_device_class)

    def watch_device_classes(self, rv: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        """Watch DeviceClasses."""
        return self._watch(self.resource.list_device_class, rv, timeout_s)

    def list_taint_rules(self) -> tuple[list[dict[str, Any]], str]:
        """Every DeviceTaintRule (``resource.k8s.io/v1beta2``, the version kube-scheduler
        1.36 watches).

        Raises:
            ApiError: refused; 404 when the API server does not serve them (the beta API
                ``resource.k8s.io/v1beta2`` is off by default in 1.36).
        """
        if self.resource_beta is None:
            raise ApiError("404 DeviceTaintRules: no resource.k8s.io/v1beta2 client", 404)
        return self._list(self.resource_beta.list_device_taint_rule)

    def watch_taint_rules(self, rv: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        """Watch DeviceTaintRules."""
        if self.resource_beta is None:
            raise ApiError("404 DeviceTaintRules: no resource.k8s.io/v1beta2 client", 404)
        return self._watch(self.resource_beta.list_device_taint_rule, rv, timeout_s)

    def list_all_pods(self) -> tuple[list[dict[str, Any]], str]:
        """Every pod that may still run (the co-location residents' profiles at start)."""
        return self.list_pods()

    # ------------------------------------------------------------------ writes
    def _request(self, method: str, path: str, params: Mapping[str, str], body: Any,
                 content_type: str) -> dict[str, Any]:
        api = self.core.api_client
        with _as_api_error():
            request = api.param_serialize(
                method=method, resource_path=path, path_params=dict(params),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body, auth_settings=["BearerToken"],
            )  # fmt: skip
            resp = api.call_api(*request, _request_timeout=self.request_timeout_s)
            if not 200 <= resp.status <= 299:
                from kubernetes.client.exceptions import ApiException

                try:
                    resp.read()
                finally:
                    resp.response.release_conn()
                raise ApiException.from_response(http_resp=resp, body=None, data=None)
            data = _drain(resp.response)
        out: dict[str, Any] = json.loads(data) if data else {}
        return out

    def patch_claim_status(self, namespace: str, name: str, resource_version: str,
                           status: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the claim's ``status.allocation`` and ``status.reservedFor`` (JSON merge
        patch; ``resource_version`` is its precondition).

        Raises:
            ApiError: refused (409: the claim changed since ``resource_version``).
        """
        body = {"metadata": {"resourceVersion": resource_version}, "status": dict(status)}
        return self._request(
            "PATCH", "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}/status",
            {"namespace": namespace, "name": name}, body, "application/merge-patch+json")

    def add_claim_finalizer(self, namespace: str, name: str, resource_version: str,
                            finalizers: list[str]) -> dict[str, Any]:
        """Set the claim's ``metadata.finalizers`` to ``finalizers`` (merge patch with
        ``resource_version`` as precondition).

        Raises:
            ApiError: refused.
        """
        body = {"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}}
        return self._request(
            "PATCH", "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}",
            {"namespace": namespace, "name": name}, body, "application/merge-patch+json")

    def release_pod(self, pod: Mapping[str, Any], annotations: Mapping[str, str]) -> None:
        """Remove gputopo's scheduling gate from ``pod`` (as last seen) and add
        ``annotations``: one JSON patch (RFC 6902; cheaper for kube-apiserver than a strategic
        merge patch) whose ``test`` operations make it apply only to that pod (its UID) and
        only while the gate is where it was seen.

        Raises:
            ApiError: refused (404: the pod is gone; 422: it changed — read it again).
        """
        ops = release_ops(pod, annotations)
        meta = pod.get("metadata") or {}
        self._request("PATCH", "/api/v1/namespaces/{namespace}/pods/{name}",
                      {"namespace": str(meta.get("namespace") or "default"),
                       "name": str(meta.get("name"))}, ops, "application/json-patch+json")

    def pod_event(self, pod: Mapping[str, Any], reason: str, message: str,
                  kind: str = "Warning") -> None:
        """Record a core/v1 Event on ``pod`` (what ``kubectl describe pod`` shows).

        Raises:
            ApiError: refused.
        """
        import time
        import uuid

        meta = pod.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{uuid.uuid4().hex[:12]}", "namespace": ns},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": meta.get("name"),
                               "uid": meta.get("uid"), "apiVersion": "v1"},
            "reason": reason, "message": message[:1024], "type": kind,
            "source": {"component": "gputopo-dra-allocator"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        self._request("POST", "/api/v1/namespaces/{namespace}/events", {"namespace": ns}, body,
                      "application/json")


__all__ = ["DraKubeAPI", "ApiError", "PENDING_PODS"]
