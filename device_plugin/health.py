"""GPU health: a versioned set of unhealthy GPUs, fed by NVML XID events.

:class:`HealthState` is what ``ListAndWatch`` streams wait on: every change bumps a version
and wakes the waiters at once. :func:`start_nvml_watch` runs
:func:`topology.discovery.nvml.watch_health` in a thread and marks GPUs unhealthy on critical
XIDs (application XIDs are ignored there). NVML has no "recovered" event, so a GPU stays
unhealthy until the plugin restarts (as in NVIDIA's plugin).

Test hook (``--fake-xid-file``, fake NVML only): :func:`start_xid_file_feeder` polls a file
and injects each new line ``<gpu-index> <xid>`` into the fake NVML with ``inject_xid``, so a
test can flip a GPU's health in the running plugin process through the same NVML event path
a real XID takes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class HealthState:
    """Unhealthy GPU UUIDs with a change counter (thread-safe)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._unhealthy: dict[str, int | None] = {}
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
        """Record a health report; returns True when it changed anything."""
        with self._cond:
            if healthy:
                changed = self._unhealthy.pop(uuid, "absent") != "absent"
            else:
                changed = uuid not in self._unhealthy
                self._unhealthy.setdefault(uuid, xid)
            if changed:
                self._version += 1
                self._cond.notify_all()
            listeners = list(self._listeners)
        if changed:
            log.warning(
                "GPU %s is now %s%s",
                uuid,
                "healthy" if healthy else "UNHEALTHY",
                f" (XID {xid})" if xid is not None else "",
            )
            for cb in listeners:
                try:
                    cb()
                except Exception:  # a listener must not break health reporting
                    log.exception("health listener failed")
        return changed

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
    nvml: Any, uuids: Iterable[str], state: HealthState, stop: threading.Event
) -> threading.Thread:
    """Run ``watch_health`` in a daemon thread feeding ``state``; a failure to start watching
    marks nothing unhealthy but is logged (the GPUs stay advertised, unmonitored)."""
    from topology.discovery.nvml import DiscoveryError, watch_health

    watched = list(uuids)

    def report(uuid: str, healthy: bool, xid: int | None) -> None:
        state.set_health(uuid, healthy, xid)

    def run() -> None:
        try:
            watch_health(nvml, watched, report, stop, poll_ms=500)
        except DiscoveryError as exc:
            log.error("GPU health watch stopped: %s", exc)

    thread = threading.Thread(target=run, name="gputopo-health", daemon=True)
    thread.start()
    return thread


def start_xid_file_feeder(
    path: Path, inject: Callable[[int, int], None], stop: threading.Event, interval_s: float = 0.1
) -> threading.Thread:
    """**Test hook.** Poll ``path``; for each new complete line ``<gpu-index> <xid>`` call
    ``inject(index, xid)`` (the fake NVML's ``inject_xid``). Bad lines are logged and skipped."""

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
                parts = line.split()
                if not parts:
                    continue
                try:
                    index, xid = int(parts[0]), int(parts[1])
                    inject(index, xid)
                    log.info("injected XID %d on GPU %d (fake NVML)", xid, index)
                except (ValueError, IndexError) as exc:
                    log.error("fake XID file %s: bad line %r: %s", path, line, exc)
            stop.wait(interval_s)

    thread = threading.Thread(target=run, name="gputopo-fake-xid", daemon=True)
    thread.start()
    return thread
