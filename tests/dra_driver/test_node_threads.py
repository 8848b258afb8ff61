"""The threads that keep the node programs' kubelet sockets up outlive what goes wrong: the
DRA driver's socket watcher (:class:`dra_driver.server.SocketWatcher`) meets gRPC's bind
failure (a ``RuntimeError`` in grpcio) as the ``OSError`` it handles, logs it, and restarts
the sockets it can; it and the device plugin's kubelet watcher
(:class:`device_plugin.registration.KubeletWatcher`) poll on after an unexpected error, and the
publishing threads (the Node's topology, the DRA driver's ResourceSlices) publish on."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from device_plugin.registration import KubeletWatcher
from dra_driver.server import SocketWatcher
from dra_driver.slices import MemorySliceStore, SliceLoop, SlicePublisher
from gpunode.grpcserver import MAX_SOCKET_PATH, UnixServer
from gpunode.publish import MemoryNodePublisher, NodeMetadata, PublishLoop
from localcluster.controlplane import wait_until
from tests.device_plugin.kubelet_stub import remove_tree, short_tmpdir
from topology import catalog


def _nothing(_server: grpc.Server) -> None:
    """No servicer: the watcher only cares about the socket."""


def test_a_socket_that_cannot_be_bound_is_logged_and_the_others_restarted(
        caplog: pytest.LogCaptureFixture) -> None:
    short = short_tmpdir()
    try:
        ok = UnixServer(short / "dra.sock", _nothing, "dra")
        deep = short / ("d" * (MAX_SOCKET_PATH + 1 - len(str(short))))
        deep.mkdir()
        too_long = UnixServer(deep / "reg.sock", _nothing, "registration")
        with pytest.raises(OSError, match="at most 107 characters"):
            too_long.start()
        watcher = SocketWatcher([too_long, ok])
        with caplog.at_level(logging.ERROR, logger="dra_driver.server"):
            watcher.check()  # neither is alive: the first cannot start, the second does
        assert ok.alive() and not too_long.alive()
        assert watcher.restarts == 1
        assert "restarting registration: cannot listen on" in caplog.text
        ok.path.unlink()  # the kubelet's plugin directory wiped: the next poll brings it back
        watcher.check()
        assert ok.alive() and watcher.restarts == 2
        ok.stop()
        assert not Path(ok.path).exists()
    finally:
        remove_tree(short)


def _polls_after_a_failure(watcher: object, stop: threading.Event) -> list[int]:
    """Make ``watcher.check`` raise an unexpected error on its first call, count the calls,
    and run ``watcher.run`` in a thread until it has polled three times."""
    calls: list[int] = []

    def check() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("a bug in one poll")
        if len(calls) >= 3:
            stop.set()
        return True

    watcher.check = check  # type: ignore[attr-defined]
    t = threading.Thread(target=watcher.run, args=(stop,), daemon=True)  # type: ignore[attr-defined]
    t.start()
    t.join(30)
    return calls


@pytest.mark.parametrize("which", ["dra-socket-watcher", "device-plugin-kubelet-watcher"])
def test_the_watch_threads_outlive_an_unexpected_error(
        which: str, caplog: pytest.LogCaptureFixture) -> None:
    """The threads that bring the kubelet's sockets back (the DRA driver's socket watcher,
    the device plugin's kubelet watcher, which also re-registers after a kubelet restart)
    log an unexpected error in one poll and poll again: were they to end, the node's GPUs
    would vanish from the kubelet at its next restart and never come back."""
    stop = threading.Event()
    watcher: object = (SocketWatcher([], interval_s=0.01) if which == "dra-socket-watcher"
                       else KubeletWatcher(Path("/nonexistent/kubelet.sock"), [],
                                           interval_s=0.01))
    with caplog.at_level(logging.ERROR):
        calls = _polls_after_a_failure(watcher, stop)
    assert len(calls) >= 3 and stop.is_set()
    assert "a bug in one poll" in caplog.text


def _fails_once(result: Any) -> Callable[[], Any]:
    """A callable raising an unexpected error on its first call, then returning ``result``."""
    calls: list[int] = []

    def call() -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("a bug in one pass")
        return result

    return call


@pytest.mark.parametrize("which", ["node-topology", "resource-slices"])
def test_the_publishing_threads_outlive_an_unexpected_error(
        which: str, caplog: pytest.LogCaptureFixture) -> None:
    """The threads that publish the Node's topology (both programs) and the DRA driver's
    ResourceSlices count an unexpected error in one pass as a failure, log it, and publish
    on the next pass (were they to end, a GPU's health change would never reach the
    scheduler)."""
    stop, errors = threading.Event(), []
    loop: Any
    if which == "node-topology":
        publisher = MemoryNodePublisher()
        loop = PublishLoop(publisher, "n0", _fails_once(NodeMetadata({}, {})), 0.01,
                           on_error=lambda: errors.append(1))
        done = lambda: bool(publisher.published)  # noqa: E731
    else:
        store = MemorySliceStore()
        loop = SliceLoop(SlicePublisher(store, catalog.get("dgx1-v100"), "n0"),
                         _fails_once(frozenset()), 0.01,
                         on_error=lambda: errors.append(1))
        done = lambda: bool(store.list("n0"))  # noqa: E731
    with caplog.at_level(logging.ERROR):
        t = loop.start(stop)
        wait_until(done, 30, f"the {which} published after the failed pass")
        stop.set()
        loop.kick()
        t.join(30)
    assert errors == [1] and "a bug in one pass" in caplog.text
