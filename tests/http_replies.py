"""What the tests' small HTTP servers (stand-ins for an API server, a scheduler extender, a DCGM
exporter) answer with: a whole body with its length, so a client reads it and no more."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


def reply(handler: BaseHTTPRequestHandler, status: int, body: bytes,
          content_type: str) -> None:
    """Answer ``status`` with ``body`` of ``content_type``."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def reply_json(handler: BaseHTTPRequestHandler, status: int, doc: Any) -> None:
    """Answer ``status`` with ``doc`` as JSON."""
    reply(handler, status, json.dumps(doc).encode(), "application/json")
