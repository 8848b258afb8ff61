"""GPU health: a versioned set of unhealthy GPUs, fed by NVML, that recovers.

:class:`HealthState` is what ``ListAndWatch`` streams wait on: every change bumps a version
and wakes the waiters at once. :func:`start_nvml_watch` runs
:func:`topology.discovery.nvml.watch_health` in a thread: a critical XID (application XIDs are
ignored there) or a failed NVML query marks a GPU unhealthy, and a probe queries every GPU
every ``health_probe_interval_s``. NVML has no "recovered" event, so recovery is a rule of
ours: a GPU marked unhealthy becomes healthy again once NVML has answered normally for it,
with no XID and no failure in between, for ``health_recovery_s`` (default 300 s; 0 = never,
as in NVIDIA's plugin). Any XID or failure restarts that period. The clock is injectable.

Test hook (``--fake-xid-file``, fake NVML only): :func:`start_xid_file_feeder` polls a file;
each new line ``<gpu-index> <xid>`` is injected into the fake NVML with ``inject_xid``,
``<gpu-index> lost`` makes every NVML query on that GPU fail (``GPU is lost``) and
``<gpu-index> ok`` makes it answer normally again, so a test can flip and recover a GPU's
health in the running plugin process through the same NVML paths a real GPU takes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: ``NVML_ERROR_GPU_IS_LOST`` (nvml.h), what ``<gpu> lost`` in the fake XID file injects.
NVML_ERROR_GPU_IS_LOST = 15


class HealthState:
    """Unhealthy GPU UUIDs with a change counter (thread-safe).

    Args:
        recovery_s: how long, seconds, an unhealthy GPU must answer NVML normally before
            :meth:`report` makes it healthy again; 0 = never.
        clock: monotonic clock, seconds (injectable for tests).
    """

    def __init__(
        self, recovery_s: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.recovery_s = recovery_s
        self._clock = clock
        self._cond = threading.Condition()
        self._unhealthy: dict[str, int | None] = {}
        self._ok_since: dict[str, float] = {}
        self._version = 0
        self._listeners: list[Callable[[], None]] = []
        self._closed = False

    @property
    def version(self) -> int:
        """Bumped on every change."""
        with self._cond:
            return self._version

    def unhealthy(self) -> frozenset[str]:
        """UUIDs of unhealthy GPUs."""
        with self._cond:
            return frozenset(self._unhealthy)

    def reasons(self) -> dict[str, int | None]:
        """UUID → the XID that made it unhealthy (None = lost / unwatchable)."""
        with self._cond:
            return dict(self._unhealthy)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (outside the lock, in the reporting thread) after each change."""
        with self._cond:
            self._listeners.append(callback)

    def set_health(self, uuid: str, healthy: bool, xid: int | None = None) -> bool:
        """Set a GPU's health outright (no recovery period); returns True when it changed."""
        with self._cond:
            self._ok_since.pop(uuid, None)
            if healthy:
                changed = self._unhealthy.pop(uuid, "absent") != "absent"
            else:
                changed = uuid not in self._unhealthy
                self._unhealthy.setdefault(uuid, xid)
            listeners = self._bump(changed)
        if changed:
            self._announce(uuid, healthy, f" (XID {xid})" if xid is not None else "", listeners)
        return changed

    def report(self, uuid: str, answered: bool, xid: int | None = None) -> bool:
        """Record what NVML just said about a GPU; returns True when its health changed.

        Args:
            uuid: the GPU.
            answered: True = NVML answered normally; False = a critical XID (``xid``) or a
                failed query (``xid`` None).
            xid: the critical XID, if that is what happened.

        A failure marks the GPU unhealthy (the first reason is kept) and restarts its
        recovery period. A normal answer for an unhealthy GPU starts the period (if not
        running) and, once ``recovery_s`` have passed since that first normal answer, makes
        the GPU healthy again; with ``recovery_s == 0`` it never does.
        """
        with self._cond:
            now = self._clock()
            if not answered:
                self._ok_since.pop(uuid, None)
                changed = uuid not in self._unhealthy
                self._unhealthy.setdefault(uuid, xid)
                why = f" (XID {xid})" if xid is not None else " (NVML query failed)"
            elif uuid not in self._unhealthy or self.recovery_s <= 0:
                return False
            else:
                since = self._ok_since.setdefault(uuid, now)
                changed = now - since >= self.recovery_s
                if changed:
                    del self._unhealthy[uuid]
                    del self._ok_since[uuid]
                why = f" (NVML answered normally for {now - since:g} s)"
            listeners = self._bump(changed)
        if changed:
            self._announce(uuid, answered, why, listeners)
        return changed

    def _bump(self, changed: bool) -> list[Callable[[], None]]:
        """Under the lock: bump the version and wake waiters when ``changed``."""
        if changed:
            self._version += 1
            self._cond.notify_all()
        return list(self._listeners)

    def _announce(
        self, uuid: str, healthy: bool, why: str, listeners: list[Callable[[], None]]
    ) -> None:
        log.warning("GPU %s is now %s%s", uuid, "healthy" if healthy else "UNHEALTHY", why)
        for cb in listeners:
            try:
                cb()
            except Exception:  # a listener must not break health reporting
                log.exception("health listener failed")

    def wait_change(self, seen: int, timeout: float) -> int:
        """Block until the version differs from ``seen``, :meth:`close` is called, or
        ``timeout`` seconds pass; returns the current version."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != seen or self._closed, timeout=timeout)
            return self._version

    def close(self) -> None:
        """Release every waiter for good (shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def start_nvml_watch(
    nvml: Any,
    uuids: Iterable[str],
    state: HealthState,
    stop: threading.Event,
    *,
    probe_interval_s: float | None = None,
    poll_ms: int = 500,
) -> threading.Thread:
    """Run ``watch_health`` in a daemon thread feeding :meth:`HealthState.report`; a failure
    to start watching marks nothing unhealthy but is logged (the GPUs stay advertised,
    unmonitored).

    Args:
        nvml: the binding (``pynvml`` or a fake).
        uuids: GPUs to watch.
        state: where reports go.
        stop: set it to end the thread.
        probe_interval_s: seconds between probe queries of every GPU; None = XID events only.
        poll_ms: event-wait timeout, milliseconds (how fast ``stop`` is noticed).
    """
    from topology.discovery.nvml import DiscoveryError, watch_health

    watched = list(uuids)

    def report(uuid: str, answered: bool, xid: int | None) -> None:
        state.report(uuid, answered, xid)

    def run() -> None:
        try:
            watch_health(nvml, watched, report, stop, poll_ms=poll_ms,
                         probe_interval_s=probe_interval_s)  # fmt: skip
        except DiscoveryError as exc:
            log.error("GPU health watch stopped: %s", exc)

    thread = threading.Thread(target=run, name="gputopo-health", daemon=True)
    thread.start()
    return thread


def start_xid_file_feeder(
    path: Path,
    inject: Callable[[int, int], None],
    stop: threading.Event,
    interval_s: float = 0.1,
    set_device_error: Callable[[int, int | None], None] | None = None,
) -> threading.Thread:
    """**Test hook.** Poll ``path``; for each new complete line ``<gpu-index> <xid>`` call
    ``inject(index, xid)`` (the fake NVML's ``inject_xid``); ``<gpu-index> lost`` /
    ``<gpu-index> ok`` call ``set_device_error(index, NVML_ERROR_GPU_IS_LOST / None)`` (the
    fake's ``set_device_error``). Bad lines are logged and skipped."""

    def apply(line: str) -> None:
        parts = line.split()
        index, what = int(parts[0]), parts[1]
        if what in ("lost", "ok"):
            if set_device_error is None:
                raise ValueError("this NVML cannot fail a device")
            set_device_error(index, NVML_ERROR_GPU_IS_LOST if what == "lost" else None)
            log.info("GPU %d %s (fake NVML)", index, "lost" if what == "lost" else "answers")
            return
        inject(index, int(what))
        log.info("injected XID %s on GPU %d (fake NVML)", what, index)

    def run() -> None:
        consumed = 0
        while not stop.is_set():
            try:
                data = path.read_text()
            except OSError:
                data = ""
            if len(data) < consumed:
                consumed = 0  # the file was truncated or replaced
            chunk = data[consumed:]
            complete = chunk[: chunk.rfind("\n") + 1]
            consumed += len(complete)
            for line in complete.splitlines():
                if not line.split():
                    continue
                try:
                    apply(line)
                except (ValueError, IndexError) as exc:
                    log.error("fake XID file %s: bad line %r: %s", path, line, exc)
            stop.wait(interval_s)

    thread = threading.Thread(target=run, name="gputopo-fake-xid", daemon=True)
    thread.start()
    return thread
