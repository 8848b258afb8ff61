"""Who may call the extender's verbs: only kube-scheduler (issue 14, "only the scheduler binds").

Three modes (``ExtenderSettings.auth``):

* ``none`` — anyone who reaches the port (the extender's historical behaviour; keep it for a
  memory-state demo or tests).
* ``loopback`` — the extender runs as a sidecar of kube-scheduler in the same pod (the chart's
  default) and the scheduler calls ``http://127.0.0.1:<port>``: a verb request from any peer
  address other than 127.0.0.0/8 or ::1 is answered **403**. The server may still listen on
  every interface so that the kubelet's probes and Prometheus reach ``/healthz``, ``/readyz``
  and ``/metrics``.
* ``mtls`` — a standalone extender behind a Service: HTTPS with an *optional* client
  certificate verified against ``client_ca`` (``ssl.CERT_OPTIONAL``). No certificate: **401**.
  A certificate whose subject common name is not one of ``allowed_client_names``: **403**.
  kube-scheduler presents its certificate with the extender's ``tlsConfig.certFile`` /
  ``keyFile`` (or ``certData`` / ``keyData``). A certificate the CA did not sign fails the TLS
  handshake itself (no HTTP status at all).

``/healthz``, ``/readyz`` and ``/metrics`` are never authenticated (probes, scrapes). Every
authenticated path is counted in ``gputopo_extender_auth_requests_total{result}`` with result
``ok``, ``unauthenticated`` (401) or ``forbidden`` (403).

uvicorn does not put the peer certificate into the ASGI scope.
:class:`PeerCertHttpToolsProtocol` (uvicorn's httptools protocol, one instance per connection)
reads it from the TLS transport when the connection is made
(``transport.get_extra_info("peercert")``, the verified certificate as
:meth:`ssl.SSLSocket.getpeercert` returns it) and puts it into that connection's copy of the
ASGI ``state`` mapping, which uvicorn copies into every request's ``scope["state"]``; the
:class:`CallerAuth` middleware reads it there. :func:`uvicorn_options` gives the matching
``uvicorn.Config`` keywords.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, Literal

from pydantic_core import to_json
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from scheduler_extender.metrics import Metrics

AuthMode = Literal["none", "loopback", "mtls"]

#: Key of the peer certificate in the ASGI ``scope["state"]`` mapping (None: no certificate).
PEER_CERT_KEY = "gputopo.peer_cert"

#: Paths served to anyone whatever the mode (kubelet probes, Prometheus).
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
PeerCert = dict[str, Any]


class _OneWriteResponse:
    """The transport as one response's :class:`RequestResponseCycle` sees it: the status
    line and headers are held back until the first body write and leave with it in one
    ``write()`` (uvicorn writes them separately: two system calls, two TCP segments, and on a
    small host two wake-ups of kube-scheduler per reply). Anything else passes through; a
    close, and the end of the response (:meth:`flush`), send what is held first."""

    __slots__ = ("_transport", "_cycle", "_held", "_headers_seen")

    def __init__(self, transport: asyncio.Transport, cycle: Any) -> None:
        self._transport = transport
        self._cycle = cycle
        self._held: bytes | None = None
        self._headers_seen = False

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data, self._held = self._held + data, None
        elif self._cycle.response_started and not self._headers_seen:
            # the first write after http.response.start: the status line and headers (a
            # "100 Continue" is written before the response starts and passes through)
            self._headers_seen = True
            self._held = data
            return
        self._transport.write(data)

    def flush(self) -> None:
        """Send what is held (a response that ends with no body write: ``HEAD``)."""
        if self._held is not None:
            self._transport.write(self._held)
            self._held = None

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools HTTP protocol (the C parser the extender runs on) writing each
    reply — status line, headers and body — in one ``write()``.

    kube-scheduler waits for every ``/filter`` and ``/prioritize`` reply inside its one
    serial scheduling cycle; a reply split in two costs a second system call on the
    extender's side and a second wake-up on the scheduler's (docs/performance.md, "The scoring
    fast path"). Used for every ``--auth`` mode (:func:`uvicorn_options`).
    """

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            one = _OneWriteResponse(self.transport, cycle)
            cycle.transport = one  # type: ignore[assignment]
            finished = cycle.on_response

            def on_response() -> None:  # every response ends here, HEAD's with no body write
                one.flush()
                finished()

            cycle.on_response = on_response


class PeerCertHttpToolsProtocol(OneWriteHttpToolsProtocol):
    """uvicorn's httptools HTTP protocol (the C parser the extender runs on) that records the
    connection's verified client certificate.

    ``connection_made`` runs once per TCP connection, after the TLS handshake; every request
    on that keep-alive connection then finds the certificate under :data:`PEER_CERT_KEY` in
    ``scope["state"]`` (an empty mapping from ``getpeercert()`` — no certificate — is stored
    as None).
    """

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cert = transport.get_extra_info("peercert")
        # a per-connection copy: uvicorn's app_state is shared by every connection
        self.app_state = {**self.app_state, PEER_CERT_KEY: cert or None}


def is_loopback(host: str | None) -> bool:
    """``host`` (an IP address text, as in the ASGI ``client``) is 127.0.0.0/8 or ::1, also
    written as an IPv4-mapped IPv6 address (``::ffff:127.0.0.1``). Anything else, including
    None or a name, is not."""
    if not host:
        return False
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def common_names(cert: PeerCert | None) -> list[str]:
    """The subject commonName values of a certificate as ``getpeercert()`` returns it
    (``{"subject": ((("commonName", "x"),), …), …}``); [] for None or no CN."""
    if not cert:
        return []
    names: list[str] = []
    for rdn in cert.get("subject") or ():
        for attr in rdn:
            if len(attr) == 2 and attr[0] == "commonName":
                names.append(str(attr[1]))
    return names


class CallerAuth:
    """ASGI middleware: authenticate the caller of every path but :data:`OPEN_PATHS`.

    Args:
        app: the wrapped ASGI app.
        mode: ``none`` (pass everything, count nothing), ``loopback`` or ``mtls``.
        allowed_names: ``mtls``: the client certificate subject common names accepted.
        metrics: where ``gputopo_extender_auth_requests_total{result}`` is counted.

    Refusals are JSON ``{"Error": "<reason>"}`` (the extender's error shape), 401 or 403.
    """

    def __init__(
        self, app: ASGIApp, *, mode: AuthMode, allowed_names: Iterable[str] = (),
        metrics: Metrics,
    ) -> None:
        self.app = app
        self.mode = mode
        self.allowed = frozenset(allowed_names)
        self.metrics = metrics

    def check(self, scope: Scope) -> tuple[int, str]:
        """``(0, "")`` when the caller may proceed, else ``(401 or 403, reason)``."""
        if self.mode == "loopback":
            client = scope.get("client")
            host = client[0] if client else None
            if is_loopback(host):
                return 0, ""
            return 403, (f"forbidden: this extender serves {scope.get('path')} only to "
                         f"kube-scheduler on loopback (127.0.0.1/::1); peer {host or 'unknown'}")
        cert = (scope.get("state") or {}).get(PEER_CERT_KEY)
        if not cert:
            return 401, ("unauthenticated: a client certificate signed by the extender's "
                         "client CA is required")
        names = common_names(cert)
        if self.allowed.intersection(names):
            return 0, ""
        shown = ", ".join(names) or "none"
        return 403, (f"forbidden: client certificate common name ({shown}) is not one of the "
                     f"allowed client names ({', '.join(sorted(self.allowed))})")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.mode == "none" or scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        status, reason = self.check(scope)
        result = "ok" if status == 0 else ("unauthenticated" if status == 401 else "forbidden")
        self.metrics.auth.labels(result=result).inc()
        if status == 0:
            await self.app(scope, receive, send)
            return
        await send_error(send, status, reason)


async def send_error(send: Send, status: int, reason: str) -> None:
    """Answer an ASGI request from a middleware with the extender's error shape: HTTP
    ``status`` and the JSON body ``{"Error": reason}``."""
    await send_json(send, status, {"Error": reason})


async def send_json(send: Send, status: int, payload: Any) -> None:
    """Answer an ASGI request from a middleware: HTTP ``status`` and ``payload`` as compact
    JSON (pydantic-core's encoder, as :func:`scheduler_extender.routes.deps.json_response`)."""
    body = to_json(payload)
    await send({
        "type": "http.response.start", "status": status,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def uvicorn_options(
    *, mode: AuthMode, tls_cert: str | None, tls_key: str | None, client_ca: str | None
) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config`` serving the extender.

    Never proxy headers (``X-Forwarded-For`` must not stand in for the peer address loopback
    mode checks). With ``tls_cert``: HTTPS. ``mtls`` adds ``ssl.CERT_OPTIONAL`` verification of
    client certificates against ``client_ca`` (optional at the TLS layer so a request without
    one gets an HTTP 401 rather than a handshake error, and probes without certificates still
    work) and the certificate-recording protocol (over httptools, which uvicorn picks itself
    when installed, as gputopo's dependencies have it; other modes keep uvicorn's choice).
    """
    opts: dict[str, Any] = {"proxy_headers": False, "http": OneWriteHttpToolsProtocol}
    if tls_cert:
        opts["ssl_certfile"] = tls_cert
        opts["ssl_keyfile"] = tls_key
    if mode == "mtls":
        opts["ssl_cert_reqs"] = ssl.CERT_OPTIONAL
        opts["ssl_ca_certs"] = client_ca
        opts["http"] = PeerCertHttpToolsProtocol
    return opts
