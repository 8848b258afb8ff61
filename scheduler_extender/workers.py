"""The decision layer's worker pool: placement decisions computed in worker processes, so
filter and prioritize can answer within a time budget (:mod:`scheduler_extender.decision`
hands them the misses).

A decision for a node state never seen before runs the policy; on a 16-GPU machine the
pattern search takes milliseconds, sometimes a hundred. Filter and prioritize hand such misses
to this pool and wait for them until their deadline; whatever is not done by then gets a
provisional answer, and the workers keep going, filling the caches for the next pods.

Processes, not threads: the work is CPU-bound Python, and a thread would hold the GIL against
the request threads that are meant to answer quickly (measured: a busy worker thread doubled
the 1,000-node filter time). A dispatcher thread keeps at most one job per worker in flight
and feeds them by priority — the newest call first, within a call in the caller's order — and
shares one job among every caller asking for the same key.

Each worker process keeps its own :class:`~topology.policies.evaluate.Evaluator` (decision
cache, per-class tables); results come back as :class:`WorkerResult` dataclasses.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from topology.model import Topology
from topology.policies.base import Decision, NodeState, Request
from topology.policies.evaluate import Evaluator
from topology.policies.scoring import NodeScore

log = logging.getLogger("gputopo.extender")


class Status(enum.Enum):
    """How a worker's decision ended."""

    OK = "ok"  #: decided (``WorkerResult.decision`` is set)
    NO_FIT = "nofit"  #: the node cannot host the request (``message`` says why)
    BAD_REQUEST = "bad-request"  #: the request is invalid for the policy (``RequestError``)
    FAILED = "error"  #: the policy raised something else (a bug; ``message`` names it)


@dataclass(frozen=True)
class WorkerResult:
    """What a worker sends back for one decision (plain picklable values).

    Attributes:
        status: how it ended.
        decision: the decision (``Status.OK`` only).
        score: its node score, or None when scoring failed (the caller scores it itself).
        message: the reason (every other status).
        seconds: compute time in the worker, s (for the caller's cost model).
        postponed: ``Status.NO_FIT`` because the policy postponed the pod
            (:class:`~topology.policies.base.Postponed`).
    """

    status: Status
    decision: Decision | None = None
    score: NodeScore | None = None
    message: str = ""
    seconds: float = 0.0
    postponed: bool = False


#: A worker process's own parsed topologies and evaluator (decision cache, policy memo):
#: this module is the runner inside each worker.
_TOPOLOGIES: dict[str, Topology] = {}
_EVALUATOR = Evaluator()


def remote_decide(
    policy: str, topology_json: str, state: NodeState, request: Request
) -> WorkerResult:
    """Worker-side: decide and score (runs in a worker process).

    The topology travels as its annotation JSON (a string pickles in microseconds, the object
    graph in half a millisecond) and is parsed once per worker.
    """
    start = time.perf_counter()
    out = _decide(policy, topology_json, state, request)
    return replace(out, seconds=time.perf_counter() - start)


def _decide(policy: str, topology_json: str, state: NodeState, request: Request) -> WorkerResult:
    from topology.policies.base import NoFit, Postponed, RequestError
    from topology.policies.scoring import node_score
    from topology.serialization import loads

    topology = _TOPOLOGIES.get(topology_json)
    if topology is None:
        topology = _TOPOLOGIES[topology_json] = loads(topology_json)
    try:
        decision = _EVALUATOR.place(policy, topology, state, request)
    except NoFit as exc:
        return WorkerResult(Status.NO_FIT, message=str(exc),
                            postponed=isinstance(exc, Postponed))
    except RequestError as exc:
        return WorkerResult(Status.BAD_REQUEST, message=str(exc))
    except Exception as exc:  # noqa: BLE001 - reported to the caller
        return WorkerResult(Status.FAILED, message=f"{type(exc).__name__}: {exc}")
    try:
        score: NodeScore | None = node_score(policy, topology, state, request, decision,
                                             evaluator=_EVALUATOR)
    except Exception:  # noqa: BLE001 - the caller scores it itself
        score = None
    return WorkerResult(Status.OK, decision=decision, score=score)


def _clear() -> int:
    """Forget the worker's decision cache and policy memo (cold-cache benchmarks)."""
    _EVALUATOR.clear()
    return os.getpid()


def default_workers() -> int:
    """Worker processes worth having: CPUs − 2 (the request thread and the rest of the
    system keep two), 0 to 4. With 0 the request thread decides within its budget alone."""
    return max(0, min(4, (os.cpu_count() or 1) - 2))


def _watch_parent(parent: int) -> None:
    """Worker-side: exit as soon as the extender process is gone (a killed parent would
    otherwise leave its workers blocked on the job pipe forever)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def _init_worker(parent: int) -> None:
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True,
                     name="gputopo-parent-watch").start()


def _warm() -> int:
    """Import everything a job needs (first job latency)."""
    from topology.policies import (
        registry,
        scoring,  # noqa: F401
    )

    registry.policies()
    return os.getpid()


class Dropped(Exception):
    """A queued job was dropped before it ran (its callers had moved on)."""


class Job:
    """One queued computation; :meth:`wait` for it, then read ``result`` / ``error``."""

    __slots__ = ("key", "args", "on_result", "done", "result", "error", "started")

    def __init__(
        self, key: Hashable, args: tuple[Any, ...], on_result: Callable[[Any], Any] | None
    ) -> None:
        self.key = key
        self.args = args
        self.on_result = on_result
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.started = False

    def wait(self, timeout: float | None) -> bool:
        """Block until done or ``timeout`` seconds passed; True when done."""
        return self.done.wait(timeout)


class WorkerPool:
    """Worker processes running :func:`remote_decide` jobs by priority.

    Args:
        workers: processes (default: :func:`default_workers`, at least 1).
        max_backlog: queued jobs beyond this are refused (:meth:`submit` returns None; the
            caller answers provisionally without queueing).
        keep_calls: queued jobs of calls older than the newest ``keep_calls`` are dropped
            unstarted — under sustained load, finishing them would only compete for CPU with
            the calls that need answers now.
    """

    def __init__(
        self, workers: int | None = None, max_backlog: int = 20_000, keep_calls: int = 4
    ) -> None:
        self.workers = workers or max(1, default_workers())
        self.keep_calls = keep_calls
        self.max_backlog = max_backlog
        self._heap: list[tuple[int, int, int, Job]] = []
        self._inflight: dict[Hashable, Job] = {}
        self._running = 0
        self._cv = threading.Condition()
        self._calls = itertools.count(1)
        self._seq = itertools.count()
        self._pool: ProcessPoolExecutor | None = None
        self._dispatcher: threading.Thread | None = None
        self._stopped = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the workers now (instead of at the first job) and warm them up."""
        with self._cv:
            self._ensure_started()
            pool = self._pool
        if pool is not None:
            for _ in range(self.workers):
                pool.submit(_warm)

    def _ensure_started(self) -> None:
        if self._stopped:
            raise RuntimeError("worker pool stopped")
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=ctx, initializer=_init_worker,
                initargs=(os.getpid(),),
            )
        if self._dispatcher is None or not self._dispatcher.is_alive():
            self._dispatcher = threading.Thread(target=self._dispatch, daemon=True,
                                                name="gputopo-workers")
            self._dispatcher.start()

    def clear_caches(self) -> None:
        """Ask the workers to forget their decision caches (one request per worker; with
        several workers some may get two and others none — good enough for benchmarks)."""
        with self._cv:
            pool = self._pool
        if pool is not None:
            for fut in [pool.submit(_clear) for _ in range(self.workers)]:
                fut.result(timeout=30)

    def stop(self) -> None:
        """Stop dispatching and shut the workers down (queued jobs stay unfinished)."""
        with self._cv:
            self._stopped = True
            pool, self._pool = self._pool, None
            self._cv.notify_all()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ jobs
    def new_call(self) -> int:
        """A call number: jobs of higher numbers run first. Jobs queued only by calls older
        than the newest ``keep_calls`` and not started yet are dropped (:class:`Dropped`)."""
        call = next(self._calls)
        oldest = call - self.keep_calls
        with self._cv:
            if any(-e[0] < oldest for e in self._heap):
                keep = [e for e in self._heap if -e[0] >= oldest]
                kept = {id(e[3]) for e in keep}
                for e in self._heap:
                    job = e[3]
                    if id(job) not in kept and not job.started:
                        job.started = True  # never run it
                        if self._inflight.get(job.key) is job:
                            del self._inflight[job.key]
                        job.error = Dropped("superseded by newer calls")
                        job.done.set()
                heapq.heapify(keep)
                self._heap = keep
        return call

    def submit(
        self, call: int, position: int, key: Hashable, args: tuple[Any, ...],
        on_result: Callable[[Any], Any] | None = None, *, reprioritize: bool = True,
    ) -> Job | None:
        """Queue ``remote_decide(*args)`` under ``key`` (shared with an identical queued or
        running job). ``on_result`` runs on the worker's result (in the dispatcher) before
        waiters wake; its return value becomes ``Job.result``. A job already queued moves up
        to this call's priority only with ``reprioritize``.

        Returns:
            The job, or None when the backlog is full or the pool is stopped.
        """
        job = self._inflight.get(key)
        if job is not None and (job.started or not reprioritize):
            return job  # fast path: already queued or running, nothing to change
        with self._cv:
            if self._stopped:
                return None
            job = self._inflight.get(key)
            new = job is None
            if job is None:
                if len(self._inflight) >= self.max_backlog:
                    return None
                job = Job(key, args, on_result)
                self._inflight[key] = job
            if not job.started and (new or reprioritize):
                heapq.heappush(self._heap, (-call, position, next(self._seq), job))
                self._ensure_started()
                self._cv.notify_all()
            return job

    def claim(self, job: Job) -> bool:
        """Take a queued job to run it in the caller's thread (the workers will skip it).
        False when a worker already started it."""
        with self._cv:
            if job.started:
                return False
            job.started = True
            return True

    def complete(self, job: Job, result: Any) -> None:
        """Finish a job the caller :meth:`claim` ed (wakes its waiters)."""
        job.result = result
        with self._cv:
            self._inflight.pop(job.key, None)
        job.done.set()

    def queued(self, key: Hashable) -> Job | None:
        """The queued or running job of ``key``, if any (lock-free)."""
        return self._inflight.get(key)

    def backlog(self) -> int:
        """Jobs queued or running."""
        return len(self._inflight)

    def _dispatch(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (not self._heap or self._running >= self.workers):
                    self._cv.wait()
                if self._stopped:
                    return
                _, _, _, job = heapq.heappop(self._heap)
                if job.started:
                    continue
                job.started = True
                self._running += 1
                pool = self._pool
            try:
                assert pool is not None
                fut = pool.submit(remote_decide, *job.args)
            except Exception as exc:  # noqa: BLE001 - broken pool: recreate, fail this job
                log.warning("worker pool failed (%s); restarting it", exc)
                with self._cv:
                    self._pool = None
                    if not self._stopped:
                        self._ensure_started()
                self._finish(job, None, exc)
                continue
            fut.add_done_callback(lambda f, job=job: self._done(job, f))  # type: ignore[misc]

    def _done(self, job: Job, fut: Future[Any]) -> None:
        try:
            self._finish(job, fut.result(), None)
        except BaseException as exc:  # noqa: BLE001 - cancelled or the worker died
            self._finish(job, None, exc)

    def _finish(self, job: Job, result: Any, error: BaseException | None) -> None:
        job.result, job.error = result, error
        if error is None and job.on_result is not None:
            try:
                job.result = job.on_result(result)
            except Exception as exc:  # noqa: BLE001
                log.exception("worker result handler failed")
                job.error = exc
        with self._cv:
            self._running -= 1
            self._inflight.pop(job.key, None)
            self._cv.notify_all()
        job.done.set()
