"""A preemption scene on a local cluster, and a recorder of what kube-scheduler sends.

The scene (:func:`build_scene`) is two DGX-1 V100 nodes, both full by the scheduler's GPU
count, on which a 4-GPU high-priority pod must preempt:

* ``shared``: GPUs 0 and 1 each hold a 60 % vGPU share (``gputopo.io/vgpu-core``, which the
  scheduler ignores), GPUs 2–7 are held by six 1-GPU pods of the *low* priority class. The
  scheduler counts six GPUs used, two free, and proposes two low-priority victims; evicting
  them leaves two idle GPUs, not four.
* ``plain``: GPUs 0–5 are held by six 1-GPU pods of the *mid* priority class, GPUs 6–7 are
  free. Two mid-priority victims free four idle GPUs. Those on GPUs 1 and 4 are started last,
  at least a second after the others, so they are the victims: among pods of one priority
  ``SelectVictimsOnNode`` reprieves the earliest started first, and a pod's start time has a
  one-second resolution (earlier, the victims depended on which pods kwok happened to start
  in the same second). The freed set {1,4,6,7} gives a 4-GPU ring 30 % of its ideal EffBW by
  MAPA's Eq. 2: a set the default policy would wait to improve on, which a preemptor must
  take (:mod:`scheduler_extender.preemption`, "No postponement").

kube-scheduler prefers the node whose highest-priority victim is lowest
(``pickOneNodeForPreemption``): ``shared``. Without the extender's preemption verb it evicts
two pods there for nothing (the pod still does not fit) and has to preempt again on
``plain``; with it, ``shared`` is dropped and only ``plain``'s two victims are evicted.
Every filler pod uses the ``baseline`` policy, so which GPUs it takes is known.

:class:`RecordingProxy` sits between kube-scheduler and the extender and keeps every request
and reply body, byte for byte; ``python -m localcluster.preemption capture DIR`` runs the
scene through it in both ``nodeCacheCapable`` modes and writes the ``/preempt`` exchanges and
the pods of the scene (the fixtures of
``tests/scheduler_extender/test_extender_preempt_replay.py``).
"""

from __future__ import annotations

import argparse
import http.server
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster.binaries import find_binaries
from localcluster.controlplane import ControlPlane, free_port
from localcluster.gpucluster import GpuCluster, GpuPod, scheduler_config

#: (name, value) of the scene's PriorityClasses.
LOW = ("gputopo-e2e-low", 10)
MID = ("gputopo-e2e-mid", 20)
HIGH = ("gputopo-e2e-high", 1000)
SHARED_NODE = "dgx-shared"
PLAIN_NODE = "dgx-plain"
NODES = {SHARED_NODE: "dgx1-v100", PLAIN_NODE: "dgx1-v100"}
WAIT_S = 90.0
#: The plain node's GPUs whose pods start last, so kube-scheduler picks them as the victims.
LATE_GPUS = (1, 4)


def _started(pod: dict[str, Any]) -> bool:
    """kwok has started the pod (``status.startTime`` set)."""
    return bool((pod.get("status") or {}).get("startTime"))


def _on(node: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": node}


@dataclass
class Scene:
    """What :func:`build_scene` created.

    Attributes:
        shared: pods on the ``shared`` node (two shares, six low-priority 1-GPU pods).
        plain: pods on the ``plain`` node (six mid-priority 1-GPU pods).
        preemptor: the 4-GPU ring of the high priority class (not created yet).
    """

    shared: list[str] = field(default_factory=list)
    plain: list[str] = field(default_factory=list)
    preemptor: GpuPod = GpuPod("preemptor", gpus=4, pattern="ring", sensitive=True,
                               priority_class=HIGH[0])


def build_scene(gc: GpuCluster, wait_s: float = WAIT_S) -> Scene:
    """Create the PriorityClasses and the pods of the scene on ``gc`` (whose nodes include
    :data:`NODES`) and wait until all are bound.

    Raises:
        TimeoutError: a pod was not bound within ``wait_s``.
        kubernetes.client.exceptions.ApiException: the API server refused an object.
    """
    for name, value in (LOW, MID, HIGH):
        gc.create_priority_class(name, value)
    scene = Scene()
    for i in range(2):  # one at a time: GPU 0, then GPU 1 (lowest index with room)
        pod = GpuPod(f"share-{i}", core_percent=60, policy="baseline",
                     node_selector=_on(SHARED_NODE), priority_class=LOW[0])
        gc.create_pod(pod)
        gc.wait_bound([pod.name], wait_s)
        scene.shared.append(pod.name)

    def fill(node: str, name: str, prio: str) -> str:
        gc.create_pod(GpuPod(name, gpus=1, policy="baseline", node_selector=_on(node),
                             priority_class=prio))
        return name

    for node, (prio, _), names in ((SHARED_NODE, LOW, scene.shared),
                                   (PLAIN_NODE, MID, scene.plain)):
        names.extend(fill(node, f"{node}-fill-{i}", prio) for i in range(6))
    gc.wait_bound(scene.shared + scene.plain, wait_s)
    # the plain node's victims: restart the pods of GPUs 1 and 4 a second later
    gc.wait_pods(scene.plain, _started, wait_s, "pods started")
    time.sleep(1.1)
    early = [f"{PLAIN_NODE}-fill-{i}" for i in LATE_GPUS]
    gc.delete_pods(early, wait_s)
    late = [fill(PLAIN_NODE, f"{PLAIN_NODE}-late-{i}", MID[0]) for i in LATE_GPUS]
    scene.plain = [p for p in scene.plain if p not in early] + late
    gc.wait_pods(late, _started, wait_s, "pods started")
    return scene


# ---------------------------------------------------------------------------- recorder
@dataclass(frozen=True)
class Exchange:
    """One proxied call: the path, the request body and the reply (status, body), as bytes."""

    path: str
    request: bytes
    status: int
    reply: bytes


class RecordingProxy:
    """An HTTP server on 127.0.0.1 that forwards every POST to ``target`` and records it.

    Args:
        target: the extender's base URL (``http://127.0.0.1:<port>``).

    Use as a context manager; :attr:`url` is what the scheduler's ``urlPrefix`` should be,
    :attr:`exchanges` what passed through (in order).
    """

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self.port = free_port()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                req = urllib.request.Request(
                    proxy.target + self.path, data=body, method="POST",
                    headers={"Content-Type": self.headers.get("Content-Type")
                             or "application/json"},
                )  # fmt: skip
                try:
                    with urllib.request.urlopen(req, timeout=30) as resp:
                        status, reply = resp.status, resp.read()
                except urllib.error.HTTPError as exc:
                    status, reply = exc.code, exc.read()
                with proxy._lock:
                    proxy.exchanges.append(Exchange(self.path, body, status, reply))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="gputopo-recording-proxy")

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def calls(self, path: str) -> list[Exchange]:
        """The exchanges on ``path`` (e.g. ``/preempt``), in order."""
        with self._lock:
            return [e for e in self.exchanges if e.path == path]

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@contextmanager
def recorded_scheduler(gc: GpuCluster, **values: Any) -> Iterator[RecordingProxy]:
    """Restart ``gc``'s kube-scheduler with the chart's configuration (``values`` as for
    :func:`localcluster.gpucluster.scheduler_config`) calling the extender through a
    :class:`RecordingProxy`; on exit the scheduler is restarted calling the extender
    directly, with the default values."""
    with RecordingProxy(gc.extender.url) as proxy:
        gc.start_scheduler(scheduler_config(proxy.url, **values))
        try:
            yield proxy
        finally:
            gc.start_scheduler(scheduler_config(gc.extender.url))


def capture(outdir: Path) -> list[Path]:
    """Run the scene through kube-scheduler in both ``nodeCacheCapable`` modes and write, per
    mode, ``preempt-request<suffix>.json`` / ``preempt-reply<suffix>.json`` (the first
    ``/preempt`` exchange, bytes as sent) and ``scene-pods<suffix>.json`` (the scene's pods as
    the API returned them when the request was made: UIDs, priorities, annotations).

    Returns:
        The files written.

    Raises:
        localcluster.BinariesUnavailable, ControlPlaneError, TimeoutError: the cluster could
            not be run.
    """
    outdir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with ControlPlane(find_binaries()) as cp, GpuCluster(cp) as gc:
        gc.start(NODES.items())
        for suffix, node_cache in (("-nodecache", True), ("", False)):
            values = {"scheduler": {"extender": {"nodeCacheCapable": node_cache}}}
            with recorded_scheduler(gc, **values) as proxy:
                scene = build_scene(gc)
                pods = sorted(gc.list_pods(), key=lambda p: p["metadata"]["name"])
                gc.create_pod(scene.preemptor)
                gc.wait_bound([scene.preemptor.name], WAIT_S)
                first = proxy.calls("/preempt")[0]
            for name, data in ((f"preempt-request{suffix}.json", first.request),
                               (f"preempt-reply{suffix}.json", first.reply),
                               (f"scene-pods{suffix}.json",
                                json.dumps(pods, indent=1, sort_keys=True).encode() + b"\n")):
                (outdir / name).write_bytes(data)
                written.append(outdir / name)
            gc.delete_all_pods()
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m localcluster.preemption capture DIR``."""
    parser = argparse.ArgumentParser(prog="python -m localcluster.preemption")
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="record kube-scheduler's /preempt requests")
    cap.add_argument("outdir", type=Path)
    args = parser.parse_args(argv)
    for path in capture(args.outdir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
