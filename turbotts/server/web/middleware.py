"""A pure ASGI middleware (streaming-safe, unlike BaseHTTPMiddleware).

Per HTTP request it sets the request id contextvar (every log line carries it),
adds ``X-Request-ID`` to the response, records duration and status metrics, and
answers 503 once the server is draining for shutdown; it counts in-flight HTTP
requests in ``app.state.num_in_flight`` so the drain knows when they are done.
An unexpected exception becomes the JSON 500 here, inside the middleware, so that
answer carries ``X-Request-ID`` too (Starlette's catch-all handler runs outside
every middleware). Files under a mount (``/static``) are labelled with the mount's
prefix in metrics, not ``unmatched``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turbotts.redaction import request_id_var as log_request_id_var
from turbotts.server.ops.context import REQUEST_ID_HEADER, new_request_id, request_id_var
from turbotts.server.web.errors import error_body, unexpected_error

_UNMETERED = frozenset({"/metrics", "/healthz", "/readyz"})


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        request_id = new_request_id(headers.get(REQUEST_ID_HEADER.lower()))
        token = request_id_var.set(request_id)
        log_token = log_request_id_var.set(request_id)  # the JSON log formatter's copy
        state: Any = scope["app"].state if "app" in scope else None
        started = time.perf_counter()
        status = 500
        has_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, has_started
            if message["type"] == "http.response.start":
                status, has_started = message["status"], True
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (REQUEST_ID_HEADER.encode(), request_id.encode())]
            await send(message)

        is_counted = scope["type"] == "http" and state is not None and scope["path"] not in _UNMETERED
        try:
            if scope["type"] == "http" and getattr(state, "is_draining", False) and scope["path"] != "/healthz":
                await _draining(send_with_id)
                return
            if is_counted:  # the drain waits for these to finish
                state.num_in_flight = getattr(state, "num_in_flight", 0) + 1
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as exc:
                if scope["type"] != "http" or has_started:
                    raise
                await _json_response(send_with_id, *unexpected_error(exc))
            finally:
                if is_counted:
                    state.num_in_flight -= 1
        finally:
            request_id_var.reset(token)
            log_request_id_var.reset(log_token)
            metrics = getattr(state, "metrics", None)
            if scope["type"] == "http" and metrics is not None and scope["path"] not in _UNMETERED:
                metrics.observe_response(_route_label(scope, state), status, time.perf_counter() - started)


def _route_label(scope: Scope, state: Any) -> str:
    """The route template; a mount's prefix for the files under it; else ``unmatched`` (bounded labels)."""
    route = scope.get("route")
    if route is not None:
        return str(getattr(route, "path", "unmatched"))
    path = str(scope.get("path", ""))
    for prefix in getattr(state, "mount_prefixes", ()):
        if path == prefix or path.startswith(prefix + "/"):
            return str(prefix)
    return "unmatched"


async def _draining(send: Send) -> None:
    body = error_body("the server is shutting down; retry on another replica", "server_error", "shutting_down")
    await _json_response(send, 503, body, [(b"retry-after", b"1")])


async def _json_response(
    send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = json.dumps(body).encode()
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": data})
