"""Run an ASGI app on a request that arrived from elsewhere, and stream its ASGI messages out.

Why: a Ray Serve replica receives a request as a Python object over a
DeploymentHandle, not as a socket. :class:`ForwardedRequest` is what the
ingress sends (method, path, headers, the whole body); :func:`stream_app` builds
the ASGI scope, feeds the app its body (or, for a WebSocket, the client's
messages as they come), and yields every message the app sends, so the first
audio bytes travel back while synthesis goes on. Closing the generator cancels
the app's task, which aborts the engine requests (the route's ``finally``).
No Ray here, so the bridge is tested with the real app in one process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message

#: where a WebSocket's later client messages come from (the ingress's relay)
NextMessage = Callable[[], Awaitable[Message]]


@dataclass(frozen=True)
class ForwardedRequest:
    """One HTTP request (body complete) or WebSocket session, as the ingress saw it."""

    type: str  # "http" or "websocket"
    path: str
    query_string: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    method: str = "GET"
    body: bytes = b""
    client: tuple[str, int] | None = None
    session_id: str | None = None  # a WebSocket's key in the relay
    relay: Any = None  # a WebSocket's relay (an actor handle the replica reads the client's messages from)

    def scope(self) -> dict[str, Any]:
        scope: dict[str, Any] = {
            "type": self.type,
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "scheme": "http" if self.type == "http" else "ws",
            "path": self.path,
            "raw_path": self.path.encode(),
            "query_string": self.query_string,
            "root_path": "",
            "headers": list(self.headers),
            "client": self.client,
            "server": None,
        }
        if self.type == "http":
            scope["method"] = self.method
        else:
            scope["subprotocols"] = []
        return scope


def _http_receive(body: bytes) -> Callable[[], Awaitable[Message]]:
    """The body once; then wait until cancelled (the ingress cancels when its client leaves)."""
    is_sent = False
    never = asyncio.Event()

    async def receive() -> Message:
        nonlocal is_sent
        if not is_sent:
            is_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    return receive


def _ws_receive(next_message: NextMessage) -> Callable[[], Awaitable[Message]]:
    is_connected = False

    async def receive() -> Message:
        nonlocal is_connected
        if not is_connected:
            is_connected = True
            return {"type": "websocket.connect"}
        return await next_message()

    return receive


def _with_header(message: Message, name: bytes, value: bytes) -> Message:
    if message["type"] in ("http.response.start", "websocket.accept"):
        return {**message, "headers": [*message.get("headers", []), (name, value)]}
    return message


async def stream_app(
    app: ASGIApp,
    request: ForwardedRequest,
    next_message: NextMessage | None = None,
    replica_header: tuple[bytes, bytes] | None = None,
) -> AsyncIterator[Message]:
    """Every message ``app`` sends for ``request``, as it sends it (plus ``replica_header`` on the start).

    Raises:
        ValueError: a WebSocket request without ``next_message``.
        Exception: whatever the app raised (after the messages it sent before).
    """
    if request.type == "websocket" and next_message is None:
        raise ValueError("a WebSocket request needs next_message (where the client's messages come from)")
    receive = _http_receive(request.body) if request.type == "http" else _ws_receive(next_message)  # type: ignore[arg-type]
    sent: asyncio.Queue[Message | None] = asyncio.Queue()

    async def send(message: Message) -> None:
        await sent.put(message)

    task = asyncio.ensure_future(app(request.scope(), receive, send))
    task.add_done_callback(lambda _: sent.put_nowait(None))
    try:
        while (message := await sent.get()) is not None:
            yield _with_header(message, *replica_header) if replica_header else message
        task.result()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
