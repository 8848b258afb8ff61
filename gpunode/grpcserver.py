"""A gRPC server on one unix socket that can be restarted and tells whether its socket is
still its own — the kubelet-facing sockets of both node programs (the device plugin's one per
resource, the DRA driver's registration and DRA sockets)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

log = logging.getLogger(__name__)

#: The longest path a unix socket can be bound to on Linux (``sun_path`` is 108 bytes with
#: its terminating NUL).
MAX_SOCKET_PATH = 107


def inode(path: Path) -> int | None:
    """The inode of ``path``, None when it does not exist."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


class UnixServer:
    """A gRPC server on ``path``.

    Args:
        path: the socket file.
        add: registers the servicers on a new ``grpc.Server``.
        name: what it serves (logs) and its threads' name prefix.
        max_workers: handler threads.
    """

    def __init__(self, path: Path, add: Callable[[grpc.Server], None], name: str,
                 max_workers: int = 4, thread_prefix: str = "") -> None:
        self.path = path
        self.add = add
        self.name = name
        self.max_workers = max_workers
        self.thread_prefix = thread_prefix or name
        self._server: Any = None
        self._inode: int | None = None

    def start(self) -> None:
        """(Re)create the socket and serve on it.

        Raises:
            OSError: the socket cannot be created or listened on (gRPC's own bind failure,
                a ``RuntimeError`` in grpcio, is raised as this too, so every caller's
                ``except OSError`` — start-up's one-line error, the socket watchers'
                retries — holds).
        """
        self.stop()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.max_workers,
                                                        thread_name_prefix=self.thread_prefix))
        self.add(server)
        try:
            port = server.add_insecure_port(f"unix://{self.path}")
        except RuntimeError:  # grpcio raises where it once returned 0 ("Failed to bind")
            port = 0
        if port == 0:
            raise OSError(f"cannot listen on {self.path}" + (
                f": a unix socket path has at most {MAX_SOCKET_PATH} characters, this one "
                f"{len(str(self.path))}" if len(str(self.path)) > MAX_SOCKET_PATH else ""))
        server.start()
        self._server = server
        self._inode = inode(self.path)
        log.info("serving %s on %s", self.name, self.path)

    def alive(self) -> bool:
        """Serving, and the socket file is still the one it created."""
        return self._server is not None and inode(self.path) == self._inode

    def stop(self, grace: float = 0.5) -> None:
        """Stop serving and remove the socket (if it is still ours)."""
        if self._server is None:
            return
        self._server.stop(grace).wait(grace + 1)
        self._server = None
        if inode(self.path) == self._inode:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        self._inode = None
