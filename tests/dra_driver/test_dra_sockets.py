"""The DRA driver's socket watcher (:class:`dra_driver.server.SocketWatcher`) outlives a
socket it cannot bring back: gRPC's bind failure (a ``RuntimeError`` in grpcio) reaches it as
the ``OSError`` it handles, so it logs, keeps polling and restarts the sockets it can."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest

from dra_driver.server import SocketWatcher
from gpunode.grpcserver import MAX_SOCKET_PATH, UnixServer
from tests.device_plugin.kubelet_stub import remove_tree, short_tmpdir


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
