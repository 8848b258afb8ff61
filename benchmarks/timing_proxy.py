"""A pass-through HTTP/1.1 proxy that times every request as its client sees it.

``benchmarks.bench_scheduler`` puts it between kube-scheduler and an extender for its
latency probe: kube-scheduler's extender client exposes no per-verb metrics, so the
*client-observed* latency of ``/filter``, ``/prioritize`` and ``/bind`` is taken here, from the
moment the proxy forwards the request's last byte to the moment it has the reply's last byte
(the loopback hop between kube-scheduler and the proxy is not included; the proxy's own
forwarding, about 0.1 ms a request, is).

One upstream connection per client connection, keep-alive both ways, bodies framed by
``Content-Length`` (what kube-scheduler's Go client, uvicorn and ``http.server`` send; a
chunked message closes the connection). ``GET /_proxy/stats`` answers locally with
``{verb: [seconds, ...]}`` and starts a new collection.

Run: ``python -m benchmarks.timing_proxy --port PORT --target http://127.0.0.1:UPSTREAM``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

STATS_PATH = b"/_proxy/stats"


class _Closed(Exception):
    """The peer closed the connection (or sent something this proxy does not frame)."""


async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP/1.1 message: ``(head, body)`` (``head`` ends with the blank line)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        raise _Closed from None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        key = name.strip().lower()
        if key == b"content-length":
            length = int(value.strip())
        elif key == b"transfer-encoding":
            raise _Closed  # not framed here; the client retries on a new connection
    try:
        body = await reader.readexactly(length) if length else b""
    except (asyncio.IncompleteReadError, ConnectionError):
        raise _Closed from None
    return head, body


class TimingProxy:
    """Forward to ``target`` (``http://host:port``), recording seconds per verb."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.samples: dict[str, list[float]] = {}

    def _stats_reply(self) -> bytes:
        data = json.dumps(self.samples).encode()
        self.samples = {}
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(data)).encode() + b"\r\n\r\n" + data)

    async def handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        """Serve one client connection until either side closes it."""
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                head, body = await _read_message(creader)
                path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
                if path.startswith(STATS_PATH):
                    cwriter.write(self._stats_reply())
                    await cwriter.drain()
                    continue
                if upstream is None:
                    upstream = await asyncio.open_connection(self.host, self.port)
                    sock = upstream[1].get_extra_info("socket")
                    if sock is not None:
                        import socket

                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                ureader, uwriter = upstream
                start = time.perf_counter()
                uwriter.write(head + body)
                await uwriter.drain()
                rhead, rbody = await _read_message(ureader)
                seconds = time.perf_counter() - start
                verb = path.split(b"?", 1)[0].rstrip(b"/").rsplit(b"/", 1)[-1].decode()
                self.samples.setdefault(verb, []).append(seconds)
                cwriter.write(rhead + rbody)
                await cwriter.drain()
        except (_Closed, ConnectionError):
            pass
        finally:
            cwriter.close()
            if upstream is not None:
                upstream[1].close()

    async def serve(self, port: int) -> None:
        """Listen on 127.0.0.1:``port`` forever (TCP_NODELAY on accepted sockets: asyncio
        sets it by default)."""
        server = await asyncio.start_server(self.handle, "127.0.0.1", port)
        async with server:
            await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.timing_proxy",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--target", required=True, help="http://host:port of the upstream")
    args = ap.parse_args(argv)
    asyncio.run(TimingProxy(args.target).serve(args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
