"""Running the planner as a service: the Job and pod watches, leader election (a
coordination.k8s.io Lease, ``kubernetes.leaderelection``), the metrics server, and the loop.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from planner.controller import Planner
from planner.kube import ApiError, KubeClient
from planner.metrics import Metrics, serve
from planner.settings import PlannerSettings

log = logging.getLogger("gputopo.planner")

#: Server-side timeout of one watch call, s (the watch is then re-opened).
WATCH_TIMEOUT_S = 300


def watch_jobs(api: KubeClient, planner: Planner, stop: threading.Event) -> None:
    """Feed managed-Job events to :meth:`Planner.observe` until ``stop``."""
    watch("job", api.list_jobs, api.watch_jobs, planner.observe, stop)


def watch_pods(api: KubeClient, planner: Planner, stop: threading.Event) -> None:
    """Feed events of pods that may hold GPUs to :meth:`Planner.observe_pod` until ``stop``
    (the list is not replayed: only GPUs freed from now on wake the loop)."""
    watch("pod", api.list_pods_versioned, api.watch_pods, planner.observe_pod, stop,
          replay=False)


def watch(what: str, list_fn: Callable[[], tuple[list[dict[str, Any]], str]],
          watch_fn: Callable[[str, int], Iterator[dict[str, Any]]],
          observe: Callable[[str, Mapping[str, Any]], None], stop: threading.Event, *,
          replay: bool = True) -> None:
    """List, then watch from the list's resourceVersion, feeding ``observe`` (the listed
    objects as ``SYNC`` when ``replay``), until ``stop``; relist after 410 Gone or an error."""
    rv = ""
    while not stop.is_set():
        try:
            if not rv:
                items, rv = list_fn()
                for obj in items if replay else ():
                    observe("SYNC", obj)
            for event in watch_fn(rv, WATCH_TIMEOUT_S):
                if stop.is_set():
                    return
                obj = event.get("object") or {}
                if event.get("type") == "BOOKMARK":
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    continue
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                observe(str(event.get("type")), obj)
        except ApiError as exc:
            if exc.status == 410:
                rv = ""
                continue
            log.warning("%s watch failed, retrying: %s", what, exc)
            rv = ""
            stop.wait(2.0)
        except Exception:  # noqa: BLE001 - the watch must come back
            log.exception("%s watch failed, retrying", what)
            rv = ""
            stop.wait(2.0)


class ServeError(RuntimeError):
    """The metrics endpoint cannot listen (a port in use); the message is one line."""


def run(settings: PlannerSettings) -> None:
    """Start the planner and block (until the process is stopped, or the Lease is lost: then
    it exits with status 1 so that its Deployment restarts it as a follower).

    Raises:
        ApiError: the Kubernetes configuration cannot be loaded.
        ServeError: the metrics port cannot be listened on.
    """
    api = KubeClient(settings.kubeconfig, settings.namespace, settings.queue)
    # the library logs every renewal at INFO
    logging.getLogger("leaderelection").setLevel(logging.WARNING)
    metrics = Metrics()
    if settings.metrics_port:
        try:
            serve(metrics, settings.metrics_host, settings.metrics_port)
        except OSError as exc:
            raise ServeError(f"cannot serve /metrics on {settings.metrics_host}:"
                             f"{settings.metrics_port}: {exc.strerror or exc}") from None
    planner = Planner(api, settings, metrics)
    stop = threading.Event()

    def lead() -> None:
        metrics.leader.set(1)
        log.info("planner leading: every %.0f s, on Job events and on GPUs freed",
                 settings.interval_s)
        threading.Thread(target=watch_jobs, args=(api, planner, stop), daemon=True,
                         name="gputopo-planner-watch").start()
        threading.Thread(target=watch_pods, args=(api, planner, stop), daemon=True,
                         name="gputopo-planner-pod-watch").start()
        planner.run()

    if not settings.leader_elect:
        lead()
        return

    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"

    def lost() -> None:
        metrics.leader.set(0)
        stop.set()
        planner.stop()
        log.error("planner lost its lease %s/%s; exiting", settings.lease_namespace,
                  settings.lease_name)
        sys.stdout.flush()
        os._exit(1)  # the library's renew loop cannot be interrupted otherwise

    leading = threading.Event()

    def lead_once() -> None:
        leading.set()
        lead()

    lock = LeaseLock(settings.lease_name, settings.lease_namespace, identity)
    cfg = electionconfig.Config(
        lock, settings.lease_duration_s, settings.renew_deadline_s, settings.retry_period_s,
        lead_once, lost)
    log.info("planner %s waiting for lease %s/%s", identity, settings.lease_namespace,
             settings.lease_name)
    while True:  # the library returns when it stops leading or gives up acquiring
        try:
            leaderelection.LeaderElection(cfg).run()
        except Exception as exc:  # noqa: BLE001 - its LeaseLock lets transport errors out
            if leading.is_set():
                lost()  # the Lease could not be renewed: as lost, never lead without it
            log.warning("planner %s: the Lease cannot be read (%s); retrying in %.0f s",
                        identity, " ".join(str(exc).split()), settings.retry_period_s)
        time.sleep(settings.retry_period_s)
