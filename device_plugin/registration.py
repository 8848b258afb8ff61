"""Registration with the kubelet, and the watch that re-registers after a kubelet restart.

A restarting kubelet deletes every plugin socket in its device-plugin directory and creates a
new ``kubelet.sock``; a plugin that does not notice stays unregistered and its resources drop
to zero. :class:`KubeletWatcher` polls the directory (every ``interval_s``, default 1 s — a
``stat`` of a few files, cheaper and simpler than inotify and not dependent on it working
through container mounts): when ``kubelet.sock`` appears or changes identity (inode or
mtime), or one of our sockets is gone or replaced, it restarts our servers and registers every
resource again. Registration failures are retried on the next poll.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc

from device_plugin.api import VERSION
from device_plugin.api import api_pb2 as pb
from device_plugin.api import api_pb2_grpc as pb_grpc
from device_plugin.server import OPTIONS, ResourceServer

log = logging.getLogger(__name__)


class RegistrationError(RuntimeError):
    """The kubelet refused or could not be reached; the message is one line."""


def register(
    kubelet_socket: Path,
    endpoint: str,
    resource_name: str,
    options: pb.DevicePluginOptions = OPTIONS,
    timeout_s: float = 5.0,
) -> None:
    """Call ``Registration.Register`` on ``kubelet_socket``.

    Args:
        kubelet_socket: path of ``kubelet.sock``.
        endpoint: our socket's file name (relative to the device-plugin directory).
        resource_name: the extended resource.
        options: our options (GetPreferredAllocation available, PreStart required).
        timeout_s: deadline, seconds.

    Raises:
        RegistrationError: the call failed.
    """
    with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
        stub = pb_grpc.RegistrationStub(channel)
        try:
            stub.Register(
                pb.RegisterRequest(
                    version=VERSION, endpoint=endpoint, resource_name=resource_name, options=options
                ),
                timeout=timeout_s,
                wait_for_ready=True,
            )
        except grpc.RpcError as exc:
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            code = exc.code().name if hasattr(exc, "code") else "ERROR"
            raise RegistrationError(
                f"registering {resource_name} at {kubelet_socket}: {code}: {detail}"
            ) from None


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


class KubeletWatcher:
    """Keeps our servers up and registered with whichever kubelet owns ``kubelet.sock``.

    Args:
        kubelet_socket: ``<device-plugin dir>/kubelet.sock``.
        servers: one per resource.
        on_registered: called with the resource name after each successful registration.
        interval_s: poll period, seconds.
    """

    def __init__(
        self,
        kubelet_socket: Path,
        servers: Sequence[ResourceServer],
        on_registered: Callable[[str], None] | None = None,
        interval_s: float = 1.0,
    ) -> None:
        self.kubelet_socket = kubelet_socket
        self.servers = list(servers)
        self.on_registered = on_registered or (lambda _r: None)
        self.interval_s = interval_s
        self._registered_with: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self.registrations = 0

    def check(self) -> bool:
        """One poll: restart dead servers, (re-)register when needed. Returns True when every
        resource is registered with the current kubelet."""
        kubelet = _identity(self.kubelet_socket)
        restarted = False
        for s in self.servers:
            if not s.alive():
                log.warning(
                    "socket %s is gone: restarting the %s server", s.socket_path, s.spec.name
                )
                s.start()
                restarted = True
        if kubelet is None:
            if self._registered_with is not None:
                log.warning("%s disappeared: waiting for the kubelet", self.kubelet_socket)
            self._registered_with = None
            return False
        if kubelet == self._registered_with and not restarted:
            return True
        try:
            for s in self.servers:
                register(self.kubelet_socket, s.spec.socket, s.spec.name)
                self.registrations += 1
                self.on_registered(s.spec.name)
                log.info("registered %s with the kubelet (%s)", s.spec.name, s.spec.socket)
        except RegistrationError as exc:
            log.error("%s; retrying in %.1fs", exc, self.interval_s)
            self._registered_with = None
            return False
        self._registered_with = kubelet
        return True

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set."""
        while not stop.is_set():
            try:
                self.check()
            except OSError as exc:
                log.error("device-plugin directory watch: %s", exc)
            except Exception:  # noqa: BLE001 - the kubelet may restart at any time: keep
                log.exception("device-plugin directory watch failed")  # watching for it
            stop.wait(self.interval_s)

    def start(self, stop: threading.Event) -> threading.Thread:
        """Run :meth:`run` in a daemon thread."""
        self._thread = threading.Thread(
            target=self.run, args=(stop,), name="gputopo-kubelet-watch", daemon=True
        )
        self._thread.start()
        return self._thread
