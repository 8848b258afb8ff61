"""The planner's edge to the Kubernetes API — the only module that talks to it (the kubernetes
client, raw JSON: ``_preload_content=False`` everywhere).

:class:`KubeApi` is what the controller needs; :class:`KubeClient` implements it against a real
API server, and tests implement it with a fake.
"""

from __future__ import annotations

import json
import logging
import socket
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, cast

from urllib3.exceptions import HTTPError

from topology.contract import LABEL_QUEUE

log = logging.getLogger("gputopo.planner")

#: Pods that may hold GPUs (finished ones do not).
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


class ApiError(RuntimeError):
    """An API call failed; ``status`` is the HTTP status (0 when there was none)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class KubeApi(Protocol):
    """What the planner asks of the API server."""

    def list_nodes(self) -> list[dict[str, Any]]:
        """All Nodes."""
        ...

    def list_jobs(self) -> tuple[list[dict[str, Any]], str]:
        """The managed Jobs and the list's resourceVersion."""
        ...

    def list_pods(self) -> list[dict[str, Any]]:
        """Pods that may hold GPUs (not Succeeded/Failed), every namespace."""
        ...

    def list_job_pods(self) -> list[dict[str, Any]]:
        """Pods of managed Jobs (label ``gputopo.io/queue``, every phase)."""
        ...

    def patch_job(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None:
        """Apply a JSON Patch to a Job (ApiError 409/422 when a ``test`` op fails)."""
        ...

    def event(self, job: Mapping[str, Any], reason: str, message: str,
              kind: str = "Normal") -> None:
        """Record an Event on a Job."""
        ...

    def read_configmap(self, namespace: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's data, or None when it does not exist."""
        ...


#: Connect and read timeouts of every call but the watches (which set their own), s: an API
#: server that accepts the connection and never answers must not hold a rescheduling point
#: for ever.
REQUEST_TIMEOUT_S = (10.0, 60.0)


def _no_reply(what: str, exc: Exception) -> ApiError:
    """An :class:`ApiError` with status 0 for a call the API server did not answer (urllib3's
    own errors: refused, reset, timed out), which the official client raises as they are."""
    return ApiError(f"{what}: no reply from the API server: {' '.join(str(exc).split())}", 0)


class KubeClient:
    """:class:`KubeApi` over the kubernetes client.

    Args:
        kubeconfig: kubeconfig file, or None for the in-cluster service account. Either also
            becomes the client's default configuration (the Lease lock of
            ``kubernetes.leaderelection`` uses the default).
        namespace: Jobs' namespace ("" = all).
        queue: only Jobs whose queue label has this value ("" = any).

    Raises:
        ApiError: the configuration cannot be loaded.
    """

    def __init__(self, kubeconfig: Path | None, namespace: str = "", queue: str = "") -> None:
        import yaml  # what load_kube_config parses with
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        try:
            if kubeconfig is not None:
                config.load_kube_config(config_file=str(kubeconfig))
            else:
                config.load_incluster_config()
        except (ConfigException, OSError, TypeError, ValueError, AttributeError, LookupError,
                yaml.YAMLError) as exc:  # a file that is not a kubeconfig: each of these
            where = f"kubeconfig {str(kubeconfig)!r}" if kubeconfig else "in-cluster config"
            raise ApiError(f"cannot load {where}: {' '.join(str(exc).split())}"
                           + ("" if kubeconfig else " (outside a cluster pass --kubeconfig)")
                           ) from None
        self.api = client.ApiClient()
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.namespace = namespace
        self.selector = f"{LABEL_QUEUE}={queue}" if queue else LABEL_QUEUE
        self.instance = f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"

    # ------------------------------------------------------------------ reads
    def _list(self, fn: Any, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
        from kubernetes.client.exceptions import ApiException

        items: list[dict[str, Any]] = []
        cont: str | None = None
        rv = ""
        try:
            while True:
                extra = {"_continue": cont} if cont else {}
                resp = fn(limit=500, _preload_content=False,
                          _request_timeout=REQUEST_TIMEOUT_S, **kwargs, **extra)
                data = json.loads(resp.data)
                items.extend(data.get("items") or [])
                meta = data.get("metadata") or {}
                rv = meta.get("resourceVersion") or rv
                cont = meta.get("continue")
                if not cont:
                    return items, rv
        except ApiException as exc:
            raise ApiError(f"list failed: {exc.status} {exc.reason}", exc.status or 0) from None
        except (HTTPError, json.JSONDecodeError) as exc:
            raise _no_reply("list failed", exc) from None

    def list_nodes(self) -> list[dict[str, Any]]:
        return self._list(self.core.list_node)[0]

    def list_jobs(self) -> tuple[list[dict[str, Any]], str]:
        if self.namespace:
            return self._list(self.batch.list_namespaced_job, namespace=self.namespace,
                              label_selector=self.selector)
        return self._list(self.batch.list_job_for_all_namespaces, label_selector=self.selector)

    def list_pods(self) -> list[dict[str, Any]]:
        return self.list_pods_versioned()[0]

    def list_pods_versioned(self) -> tuple[list[dict[str, Any]], str]:
        """Pods that may hold GPUs (not Succeeded/Failed), every namespace, and the list's
        resourceVersion (where :meth:`watch_pods` starts)."""
        return self._list(self.core.list_pod_for_all_namespaces,
                          field_selector=POD_FIELD_SELECTOR)

    def list_job_pods(self) -> list[dict[str, Any]]:
        if self.namespace:
            return self._list(self.core.list_namespaced_pod, namespace=self.namespace,
                              label_selector=self.selector)[0]
        return self._list(self.core.list_pod_for_all_namespaces,
                          label_selector=self.selector)[0]

    def watch_jobs(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        """Job events ``{"type", "object"}`` from ``resource_version``; ends on timeout.

        Raises:
            ApiError: the watch failed (status 410: the resourceVersion is too old).
        """
        fn: Any
        kwargs: dict[str, Any] = {"label_selector": self.selector}
        if self.namespace:
            fn, kwargs["namespace"] = self.batch.list_namespaced_job, self.namespace
        else:
            fn = self.batch.list_job_for_all_namespaces
        return self._watch(fn, kwargs, resource_version, timeout_s)

    def watch_pods(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        """Events ``{"type", "object"}`` of the pods :meth:`list_pods_versioned` lists, from
        ``resource_version``; a pod that ends (Succeeded/Failed) leaves the field selector and
        comes as ``DELETED``. Ends on timeout.

        Raises:
            ApiError: the watch failed (status 410: the resourceVersion is too old).
        """
        return self._watch(self.core.list_pod_for_all_namespaces,
                           {"field_selector": POD_FIELD_SELECTOR}, resource_version, timeout_s)

    def _watch(self, fn: Any, kwargs: Mapping[str, Any], resource_version: str,
               timeout_s: int) -> Iterator[dict[str, Any]]:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        def raw(**kw: Any) -> Any:
            return fn(**kw)

        w = watch.Watch()
        try:
            for event in w.stream(raw, resource_version=resource_version or None,
                                  timeout_seconds=timeout_s, allow_watch_bookmarks=True,
                                  _request_timeout=(10, timeout_s + 30), **kwargs):
                if isinstance(event, dict):
                    if event.get("type") == "ERROR":
                        obj = event.get("raw_object") or {}
                        code = int(obj.get("code") or 0) if isinstance(obj, dict) else 0
                        raise ApiError(f"watch error {code}", code)
                    yield {"type": event.get("type"),
                           "object": event.get("raw_object", event.get("object"))}
        except ApiException as exc:
            raise ApiError(f"watch failed: {exc.status} {exc.reason}", exc.status or 0) from None
        except HTTPError as exc:
            raise _no_reply("watch failed", exc) from None
        finally:
            w.stop()

    def read_configmap(self, namespace: str, name: str) -> dict[str, str] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.core.read_namespaced_config_map(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
            data = json.loads(cast(Any, resp).data).get("data") or {}
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ApiError(f"read configmap {namespace}/{name}: {exc.status} {exc.reason}",
                           exc.status or 0) from None
        except (HTTPError, json.JSONDecodeError) as exc:
            raise _no_reply(f"read configmap {namespace}/{name}", exc) from None
        return {str(k): str(v) for k, v in data.items()}

    # ------------------------------------------------------------------ writes
    def patch_job(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.batch.patch_namespaced_job(name, namespace, [dict(op) for op in ops],
                                            _content_type="application/json-patch+json",
                                            _preload_content=False,
                                            _request_timeout=REQUEST_TIMEOUT_S)
        except HTTPError as exc:  # sent, maybe applied: the next rescheduling point re-reads
            raise _no_reply(f"patch job {namespace}/{name}", exc) from None
        except ApiException as exc:
            detail = ""
            try:
                detail = json.loads(exc.body or "{}").get("message", "")
            except (json.JSONDecodeError, AttributeError):
                detail = str(exc.body or "")
            raise ApiError(f"patch job {namespace}/{name}: {exc.status} {detail or exc.reason}",
                           exc.status or 0) from None

    def event(self, job: Mapping[str, Any], reason: str, message: str,
              kind: str = "Normal") -> None:
        from kubernetes.client.exceptions import ApiException

        meta = job.get("metadata") or {}
        now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        ns = str(meta.get("namespace", "default"))
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'job')}.", "namespace": ns},
            "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "namespace": ns,
                               "name": meta.get("name"), "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": message[:1024], "type": kind,
            "source": {"component": "gputopo-planner"},
            "reportingComponent": "gputopo.io/planner", "reportingInstance": self.instance,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1, "action": reason,
        }
        try:
            self.core.create_namespaced_event(ns, cast(Any, body), _preload_content=False,
                                              _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:  # an Event is best effort
            log.warning("event %s on %s/%s not recorded: %s", reason, ns, meta.get("name"),
                        exc.reason)
        except HTTPError as exc:
            log.warning("event %s on %s/%s not recorded: %s", reason, ns, meta.get("name"),
                        _no_reply("event", exc))
