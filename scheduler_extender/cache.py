"""A bounded, thread-safe map for the extender's decision caches."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class BoundedCache:
    """At most ``size`` entries; a put beyond that drops the oldest entry.

    Reads are lock-free dict lookups (a read never reorders), writes take a lock, so the
    request threads and the event loop may share one.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._d: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The value under ``key``, or None."""
        return self._d.get(key)

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` under ``key``, dropping the oldest entry when over ``size``."""
        with self._lock:
            self._d[key] = value
            if len(self._d) > self.size:
                self._d.popitem(last=False)

    def pop(self, key: Hashable) -> Any:
        """Remove and return the value under ``key`` (None when absent)."""
        with self._lock:
            return self._d.pop(key, None)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._d.clear()
