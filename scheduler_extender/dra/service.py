"""``gputopo dra-allocator`` as a process: the lists and watches that feed
:class:`~scheduler_extender.dra.allocator.Allocator`, leader election (a coordination.k8s.io
Lease), and ``/healthz``, ``/readyz``, ``/metrics``.

Start-up rebuilds everything from the API before the first decision: Nodes, gputopo's
ResourceSlices, DeviceClasses and every ResourceClaim (the GPUs they hold), the profiles of
co-located jobs from their pods' ``gputopo.io/colocation`` annotation, then the pods not bound
yet. A restarted (or newly elected) allocator therefore neither loses an allocation nor hands
out a GPU twice.

Metrics (prometheus-client's exposition, read at each scrape)::

    gputopo_dra_allocator_leader                 1 while this replica holds the Lease
    gputopo_dra_allocator_ready                  1 once the state is synced
    gputopo_dra_allocator_claims_allocated_total claims whose allocation was written
    gputopo_dra_allocator_pods_released_total    pods whose scheduling gate was removed
    gputopo_dra_allocator_decisions_total        placement decisions made
    gputopo_dra_allocator_decision_seconds       histogram: one placement decision's time, s
    gputopo_dra_allocator_write_errors_total     failed API writes (the pod is tried again)
    gputopo_dra_allocator_requeued_after_deallocation_total
                                                 claims kube-scheduler's PostFilter
                                                 deallocated while their pod waited (decided
                                                 again without that node)
    gputopo_dra_allocator_waiting_pods           pods waiting for GPUs
    gputopo_dra_allocator_held_claims            allocated gputopo claims the state holds
    gputopo_dra_allocator_device_taint_rules     DeviceTaintRules applied to the devices
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from scheduler_extender.dra.allocator import Allocator
from scheduler_extender.dra.claims import ClaimAsk
from scheduler_extender.dra.kube import DraKubeAPI
from scheduler_extender.dra.settings import AllocatorSettings
from scheduler_extender.dra.state import DraState
from scheduler_extender.kubernetes_state import ApiError, WatchExpired
from scheduler_extender.profiles import ProfileLayers
from topology.contract import ANN_COLOCATION, AssignmentError, parse_assignment
from topology.dra import DeviceKind

log = logging.getLogger("gputopo.dra.allocator")

#: Server-side timeout of one watch call, s (the watch is then re-opened).
WATCH_TIMEOUT_S = 300

#: How often to look again whether the API server serves DeviceTaintRules, s, while it does
#: not (``resource.k8s.io/v1beta2`` is off by default in 1.36).
TAINT_RULES_RECHECK_S = 60.0

Lister = Callable[[], tuple[list[dict[str, Any]], str]]
Watcher = Callable[[str, int], Iterator[dict[str, Any]]]
Handler = Callable[[str, Mapping[str, Any]], None]


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class ServeError(RuntimeError):
    """The probe/metrics endpoint cannot listen (a port in use); the message is one line."""


class Feeds:
    """The list + watch loops of one allocator (a thread per kind; relist after 410 Gone or
    an error)."""

    def __init__(self, api: DraKubeAPI, allocator: Allocator) -> None:
        self.api = api
        self.allocator = allocator
        self.stop = threading.Event()
        a = allocator
        self.kinds: dict[str, tuple[Lister, Watcher, Handler]] = {
            "nodes": (api.list_nodes, api.watch_nodes, a.on_node),
            "slices": (api.list_slices, api.watch_slices, a.on_slice),
            "classes": (api.list_device_classes, api.watch_device_classes, a.on_class),
            "claims": (api.list_claims, api.watch_claims, a.on_claim),
            "pods": (api.list_pending_pods, api.watch_pending_pods, a.on_pod),
            "taint-rules": (api.list_taint_rules, api.watch_taint_rules, a.on_taint_rule),
        }
        self._rv: dict[str, str] = {}
        #: whether the API server serves DeviceTaintRules (None: not asked yet)
        self.taint_rules_served: bool | None = None

    def sync(self) -> None:
        """List every kind once, in dependency order, and rebuild the state.

        Raises:
            ApiError: a list failed.
        """
        state = self.allocator.state
        for kind in ("nodes", "slices", "taint-rules", "classes", "claims"):
            self._list(kind)
            state.mark_synced(kind)
        self._residents()
        self._list("pods")

    def _list(self, kind: str) -> None:
        lister, _watch, handle = self.kinds[kind]
        if kind == "taint-rules":
            try:
                items, rv = lister()
            except ApiError as exc:
                if exc.status != 404:
                    raise
                if self.taint_rules_served is not False:
                    log.info("the API server does not serve DeviceTaintRules "
                             "(resource.k8s.io/v1beta2); only taints in ResourceSlices count; "
                             "looking again every %.0f s", TAINT_RULES_RECHECK_S)
                self.taint_rules_served = False
                self.allocator.resync_taint_rules([])
                return
            if self.taint_rules_served is not True:
                log.info("watching DeviceTaintRules (resource.k8s.io/v1beta2)")
            self.taint_rules_served = True
        else:
            items, rv = lister()
        if kind == "claims":
            self.allocator.state.resync_claims(items)
            for obj in items:
                self.allocator.on_claim("ADDED", obj)
        elif kind == "taint-rules":
            self.allocator.resync_taint_rules(items)
        else:
            for obj in items:
                handle("ADDED", obj)
        self._rv[kind] = rv

    def _residents(self) -> None:
        """Co-located jobs' profiles from their pods (only when slot claims are allocated)."""
        state = self.allocator.state
        slot_claims = [(obj, c) for obj, c in state.claims() if isinstance(c, ClaimAsk)
                       and c.allocation is not None and c.allocation.kind is DeviceKind.SLOT]
        if not slot_claims:
            return
        pods, _ = self.api.list_all_pods()
        by_uid = {str((p.get("metadata") or {}).get("uid")): p for p in pods}
        for obj, c in slot_claims:
            for uid in c.reserved_for:
                pod = by_uid.get(uid)
                ann = ((pod or {}).get("metadata") or {}).get("annotations") or {}
                if ANN_COLOCATION not in ann:
                    continue
                try:
                    resident = parse_assignment(ann).colocation
                except AssignmentError as exc:
                    log.warning("pod of claim %s: %s", c.key, exc)
                    continue
                if resident is not None:
                    state.remember_resident(c.uid, resident)
                    state.apply_claim("MODIFIED", obj)

    def start(self) -> None:
        """Watch every kind in daemon threads."""
        for kind in self.kinds:
            threading.Thread(target=self._watch_loop, args=(kind,), daemon=True,
                             name=f"gputopo-dra-watch-{kind}").start()

    def _watch_loop(self, kind: str) -> None:
        _lister, watch, handle = self.kinds[kind]
        backoff = 0.5
        while not self.stop.is_set():
            if kind == "taint-rules" and not self.taint_rules_served:
                if self.stop.wait(TAINT_RULES_RECHECK_S):
                    return
                self._relist(kind)
                continue
            try:
                for event in watch(self._rv.get(kind, ""), WATCH_TIMEOUT_S):
                    if self.stop.is_set():
                        return
                    obj = event.get("object") or {}
                    rv = _rv(obj)
                    if rv:
                        self._rv[kind] = rv
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        handle(str(event["type"]), obj)
                backoff = 0.5
            except WatchExpired:
                log.info("%s watch expired (410 Gone); relisting", kind)
                self._relist(kind)
            except Exception as exc:  # noqa: BLE001 - keep watching whatever happens
                log.warning("%s watch failed: %s; retrying in %.1fs", kind, exc, backoff)
                if self.stop.wait(backoff):
                    return
                backoff = min(backoff * 2, 10.0)
                self._relist(kind)

    def _relist(self, kind: str) -> None:
        try:
            self._list(kind)
        except ApiError as exc:
            log.warning("%s relist failed: %s", kind, exc)


class _Collector:
    """The allocator's counters and the state's sizes as metric families, read at each
    scrape (the allocator itself keeps plain integers: :class:`~.allocator.Metrics`)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        s = self.service
        m = s.allocator.metrics
        yield GaugeMetricFamily("gputopo_dra_allocator_leader",
                                "1 while this replica holds the Lease.", value=int(s.leading))
        yield GaugeMetricFamily("gputopo_dra_allocator_ready", "1 once the state is synced.",
                                value=int(s.synced))
        for name, doc, value in (
            ("claims_allocated", "Claims whose allocation was written.", m.allocated_claims),
            ("pods_released", "Pods whose scheduling gate was removed.", m.released_pods),
            ("decisions", "Placement decisions made.", m.decisions),
            ("write_errors", "Failed API writes (the pod is tried again).", m.write_errors),
            ("requeued_after_deallocation", "Claims kube-scheduler deallocated while their pod "
             "waited (decided again without that node).", m.requeued_after_deallocation),
        ):
            yield CounterMetricFamily(f"gputopo_dra_allocator_{name}", doc, value=value)
        yield GaugeMetricFamily("gputopo_dra_allocator_waiting_pods", "Pods waiting for GPUs.",
                                value=len(s.allocator.pending()))
        yield GaugeMetricFamily("gputopo_dra_allocator_held_claims",
                                "Allocated gputopo claims the state holds.",
                                value=sum(1 for a in s.state.book.all() if a.confirmed))
        yield GaugeMetricFamily("gputopo_dra_allocator_device_taint_rules",
                                "DeviceTaintRules applied to the devices.",
                                value=s.state.taint_rule_count())


class _Probes(BaseHTTPRequestHandler):
    """``/healthz`` (alive), ``/readyz`` (synced and, with leader election, leading or
    standing by) and ``/metrics``."""

    service: Service

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        svc = self.service
        if self.path.startswith("/metrics"):
            body, code, ctype = svc.metrics_text().encode(), 200, "text/plain; version=0.0.4"
        elif self.path.startswith("/readyz"):
            ok = svc.ready()
            body, code, ctype = (b"ok" if ok else b"not synced"), (200 if ok else 503), \
                "text/plain"
        else:
            body, code, ctype = b"ok", 200, "text/plain"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        return


class Service:
    """One allocator process (see the module docstring)."""

    def __init__(self, settings: AllocatorSettings, api: DraKubeAPI | None = None) -> None:
        self.settings = settings
        self.api = api or DraKubeAPI.from_config(settings.kubeconfig,
                                                 bind_connections=settings.writers)
        profiles = ProfileLayers(settings.profile_catalog, settings.user_profiles)
        self.state = DraState()
        self.registry = CollectorRegistry()
        self.decision_seconds = Histogram(
            "gputopo_dra_allocator_decision_seconds", "One placement decision's time, s.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry)
        self.allocator = Allocator(self.state, self.api, policy=settings.policy,
                                   colocation_policy=settings.colocation_policy,
                                   profiles=profiles, writers=settings.writers,
                                   postpone_max_s=settings.postpone_max_s,
                                   observe_decision=self.decision_seconds.observe)
        self.registry.register(_Collector(self))
        self.feeds = Feeds(self.api, self.allocator)
        self.leading = not settings.leader_elect
        self._synced = False
        self._server: ThreadingHTTPServer | None = None

    @property
    def synced(self) -> bool:
        """The state has been rebuilt from the API (this replica leads, or led)."""
        return self._synced

    def ready(self) -> bool:
        """Alive and, when leading, synced (a standby is ready: it only waits)."""
        return self._synced or not self.leading

    def metrics_text(self) -> str:
        """The metrics page (module docstring), in prometheus-client's text exposition."""
        return generate_latest(self.registry).decode()

    def serve_probes(self) -> None:
        """Start the probe/metrics HTTP server (port 0: none).

        Raises:
            ServeError: the port cannot be listened on.
        """
        if not self.settings.port:
            return
        handler = type("Probes", (_Probes,), {"service": self})
        try:
            self._server = ThreadingHTTPServer((self.settings.host, self.settings.port), handler)
        except OSError as exc:
            raise ServeError(f"cannot serve the probes and /metrics on {self.settings.host}:"
                             f"{self.settings.port}: {exc.strerror or exc}") from None
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name="gputopo-dra-probes").start()

    def lead(self) -> None:
        """Sync, then allocate until the process ends."""
        self.leading = True
        while True:
            try:
                self.feeds.sync()
                break
            except ApiError as exc:
                log.warning("initial list failed: %s; retrying in 2 s", exc)
                time.sleep(2.0)
        self._synced = True
        self.allocator.start()
        self.feeds.start()
        log.info("dra-allocator leading: %d nodes offer GPUs, %d claims held, policy %s",
                 len(self.state.node_names()), len(self.state.book.all()),
                 self.settings.policy)
        threading.Event().wait()

    def run(self) -> None:
        """Serve probes and lead (after taking the Lease, with leader election)."""
        self.serve_probes()
        if not self.settings.leader_elect:
            self.lead()
            return
        from kubernetes import config as k8s_config
        from kubernetes.leaderelection import electionconfig, leaderelection
        from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

        if self.settings.kubeconfig is not None:
            k8s_config.load_kube_config(config_file=str(self.settings.kubeconfig))
        else:
            k8s_config.load_incluster_config()
        logging.getLogger("leaderelection").setLevel(logging.WARNING)
        identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        s = self.settings

        def lost() -> None:
            log.error("dra-allocator lost its lease %s/%s; exiting", s.lease_namespace,
                      s.lease_name)
            sys.stdout.flush()
            os._exit(1)  # the library's renew loop cannot be interrupted otherwise

        leading = threading.Event()

        def lead_once() -> None:
            leading.set()
            self.lead()

        lock = LeaseLock(s.lease_name, s.lease_namespace, identity)
        cfg = electionconfig.Config(lock, s.lease_duration_s, s.renew_deadline_s,
                                    s.retry_period_s, lead_once, lost)
        log.info("dra-allocator %s waiting for lease %s/%s", identity, s.lease_namespace,
                 s.lease_name)
        while True:
            try:
                leaderelection.LeaderElection(cfg).run()
            except Exception as exc:  # noqa: BLE001 - its LeaseLock lets transport errors out
                if leading.is_set():
                    lost()  # the Lease could not be renewed: as lost, never lead without it
                log.warning("dra-allocator %s: the Lease cannot be read (%s); retrying in "
                            "%.0f s", identity, " ".join(str(exc).split()), s.retry_period_s)
            time.sleep(s.retry_period_s)


def run(settings: AllocatorSettings) -> None:
    """Run the allocator until the process ends.

    Raises:
        ApiError: the Kubernetes configuration cannot be loaded.
        ServeError: the probe/metrics port cannot be listened on.
    """
    Service(settings).run()
