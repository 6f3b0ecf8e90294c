"""Raw HTTP/1.1 and WebSocket exchanges for the fuzzer, with their outcomes classified.

An HTTP client library would refuse to send most of what a fuzzer needs (bad
framing, invalid UTF-8, a wrong Content-Length), so requests go out as the exact
bytes given, on their own connection (``Connection: close``). h11 only reads the
answer, so that chunked and Content-Length framing are checked as a client would.
The request is written while the answer is read: a server may answer before it
has read a large body, and that answer still counts.

An outcome is *dropped* when the connection ended (closed or reset) before a
complete response or WebSocket close frame arrived: the server broke off instead
of answering, which a fuzzer counts as a failure just like a 5xx.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any

import h11
import websockets
from websockets.asyncio.client import ClientConnection

ABORT = "<abort>"  # in a WebSocket script: drop the TCP connection without a close frame


@dataclass(frozen=True)
class HttpOutcome:
    """What came back for one raw request: a status, or why none came (``failure``)."""

    status: int | None
    content_type: str = ""
    body: bytes = b""
    failure: str | None = None  # "dropped", "timeout" or "bad_response" when status is None

    @property
    def error_message(self) -> str | None:
        """``error.message`` of an OpenAI-shaped JSON error body, else None."""
        return error_message_of(self.body) if self.content_type.startswith("application/json") else None


def error_message_of(body: bytes | str) -> str | None:
    """The non-empty ``error.message`` of ``{"error": {"message": ...}}``, or None for any other body."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message else None


def build_request(method: str, target: str, body: bytes = b"", headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """The bytes of one request (Host, Content-Length and Connection: close added)."""
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers)]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def exchange(host: str, port: int, request: bytes, timeout_s: float = 60.0) -> HttpOutcome:
    """Send ``request`` on a new connection and read the whole response."""
    try:
        return await asyncio.wait_for(_exchange(host, port, request), timeout_s)
    except TimeoutError:
        return HttpOutcome(None, failure="timeout")


async def _exchange(host: str, port: int, request: bytes) -> HttpOutcome:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return HttpOutcome(None, failure="dropped")
    sender = asyncio.create_task(_send(writer, request))
    try:
        return await _read_response(reader, _reader_for(request))
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await sender
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _send(writer: asyncio.StreamWriter, request: bytes) -> None:
    with contextlib.suppress(OSError):  # the server may close once it has answered; the answer decides
        writer.write(request)
        await writer.drain()


def _reader_for(request: bytes) -> h11.Connection:
    """An h11 client that believes it sent ``request``'s method (HEAD answers carry no body)."""
    method = request.split(b" ", 1)[0]
    connection = h11.Connection(h11.CLIENT)
    try:
        connection.send(h11.Request(method=method, target="/", headers=[("Host", "x"), ("Content-Length", "0")]))
    except h11.LocalProtocolError:
        connection = h11.Connection(h11.CLIENT)
        connection.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    connection.send(h11.EndOfMessage())
    return connection


async def _read_response(reader: asyncio.StreamReader, connection: h11.Connection) -> HttpOutcome:
    status: int | None = None
    content_type, body = "", bytearray()
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError:
            return HttpOutcome(None, failure="bad_response")
        if event is h11.NEED_DATA:
            try:
                data = await reader.read(65536)
            except OSError:
                data = b""
            connection.receive_data(data)  # b"" tells h11 the connection closed
            continue
        if isinstance(event, h11.Response):
            status = event.status_code
            content_type = dict(event.headers).get(b"content-type", b"").decode("latin-1")
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return HttpOutcome(status, content_type, bytes(body))
        elif isinstance(event, h11.ConnectionClosed):
            return HttpOutcome(None, failure="dropped")


@dataclass(frozen=True)
class WsOutcome:
    """How a WebSocket session ended.

    ``kind``: ``done`` (the final done message), ``error`` (an error message, then a close),
    ``closed`` (a close frame without an error message), ``aborted`` (we dropped it on
    purpose), ``dropped`` (no close frame) or ``timeout``.
    """

    kind: str
    close_code: int | None = None
    num_audio_bytes: int = 0
    error: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        return f"ws_{self.kind}" if self.close_code is None else f"ws_{self.kind}_{self.close_code}"


async def ws_session(url: str, script: tuple[str | bytes, ...], timeout_s: float = 60.0) -> WsOutcome:
    """Send the messages of ``script`` (``ABORT`` drops the connection), then read until the server closes."""
    try:
        return await asyncio.wait_for(_ws_session(url, script), timeout_s)
    except TimeoutError:
        return WsOutcome("timeout")


async def _ws_session(url: str, script: tuple[str | bytes, ...]) -> WsOutcome:
    try:
        async with websockets.connect(url, max_size=None, open_timeout=30, close_timeout=10) as ws:
            for message in script:
                if message == ABORT:
                    ws.transport.abort()
                    return WsOutcome("aborted")
                await ws.send(message)
            return await _ws_replies(ws)
    except websockets.ConnectionClosed as exc:  # closed while we were still sending
        return _closed(exc, None, 0)
    except (OSError, websockets.InvalidHandshake):
        return WsOutcome("dropped")


async def _ws_replies(ws: ClientConnection) -> WsOutcome:
    num_audio_bytes, error = 0, None
    try:
        while True:
            reply = await ws.recv()
            if isinstance(reply, bytes):
                num_audio_bytes += len(reply)
                continue
            message = json.loads(reply)
            if message.get("type") == "done":
                await ws.close()
                return WsOutcome("done", None, num_audio_bytes)
            if message.get("type") == "error":
                error = message.get("error")
    except websockets.ConnectionClosed as exc:
        return _closed(exc, error, num_audio_bytes)


def _closed(exc: websockets.ConnectionClosed, error: dict[str, Any] | None, num_audio_bytes: int) -> WsOutcome:
    if exc.rcvd is None:
        return WsOutcome("dropped", None, num_audio_bytes, error)
    return WsOutcome("error" if error else "closed", exc.rcvd.code, num_audio_bytes, error)
