"""Running a node program until SIGTERM or SIGINT, then stopping it cleanly."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType


def run_until_signalled(start: Callable[[], None], stop: Callable[[], None],
                        stop_event: threading.Event, log: logging.Logger,
                        stopped: str = "stopped") -> None:
    """Call ``start``, block until SIGTERM or SIGINT (which set ``stop_event``) or until
    ``stop_event`` is set otherwise, then call ``stop`` and log ``stopped``."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        stop_event.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    start()
    try:
        while not stop_event.wait(0.5):
            pass
    finally:
        stop()
        log.info("%s", stopped)
