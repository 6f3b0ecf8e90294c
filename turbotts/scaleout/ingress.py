"""The ingress deployment: reads a request, keys it, forwards it to a replica, relays the stream.

Why a deployment of its own in front of the replicas: Ray's HTTP proxy picks a
replica before the body has arrived, so it cannot route on the text. The ingress
reads the body, computes the routing key (:mod:`.routing`) and calls the replica
deployment over a DeploymentHandle with ``stream=True``; the replica's ASGI
messages come back as they are made, so the first audio bytes reach the client
before synthesis ends.

Failures: a replica that dies before its response started is retried on another
one (nothing was sent yet); one that dies mid-stream ends the stream cleanly: an
SSE ``error`` event, or a cut connection for a byte stream (the client sees a
short read, never a hang), or WebSocket close 1011. ``/metrics`` is answered
here, from every replica (:mod:`.fleet_metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import Any

import ray
from prometheus_client import CONTENT_TYPE_LATEST
from ray import serve
from starlette.types import Message, Receive, Scope, Send

from turbotts.errors import InputTooLongError, ServiceUnavailableError
from turbotts.scaleout import fleet_metrics
from turbotts.scaleout.bridge import ForwardedRequest
from turbotts.scaleout.routing import routing_key
from turbotts.server.web.errors import describe

MAX_BODY_BYTES = 64 * 2**20
NUM_ATTEMPTS = 3  # a request whose replica died before answering goes to another one
_REPLICA_GONE = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
logger = logging.getLogger(__name__)


@ray.remote(num_cpus=0)
class MessageRelay:
    """WebSocket client messages, from the ingress to the replica that serves the session."""

    def __init__(self) -> None:
        self._queues: dict[str, asyncio.Queue[Message]] = {}

    def _queue(self, session: str) -> asyncio.Queue[Message]:
        return self._queues.setdefault(session, asyncio.Queue())

    async def put(self, session: str, message: Message) -> None:
        self._queue(session).put_nowait(message)

    async def get(self, session: str) -> Message:
        return await self._queue(session).get()

    async def close(self, session: str) -> None:
        self._queues.pop(session, None)


def _error_message(exc: BaseException) -> tuple[int, bytes]:
    status, body = describe(exc)
    return status, json.dumps(body).encode()


async def _send_error(send: Send, exc: BaseException) -> None:
    status, body = _error_message(exc)
    headers = [(b"content-type", b"application/json")]
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class IngressApp:
    """A raw ASGI app (streaming-safe) that forwards to the replica deployment."""

    def __init__(self, replicas: Any, max_segment_chars: int) -> None:
        self._replicas = replicas
        self._max_segment_chars = max_segment_chars
        self._relay = MessageRelay.remote()  # type: ignore[attr-defined]
        self._board = fleet_metrics.board()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/metrics":
            await self._metrics(send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)

    def _request(self, scope: Scope, **extra: Any) -> ForwardedRequest:
        client = scope.get("client")
        return ForwardedRequest(
            type=scope["type"],
            path=scope["path"],
            query_string=scope.get("query_string", b""),
            headers=[(bytes(k), bytes(v)) for k, v in scope.get("headers", [])],
            client=(str(client[0]), int(client[1])) if client else None,
            **extra,
        )

    def _stream(self, request: ForwardedRequest, key: str | None) -> Any:
        return self._replicas.options(stream=True).forward.remote(request, routing_key=key)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if body is None:
            await _send_error(send, InputTooLongError("the request body is over 64 MiB; send less"))
            return
        request = self._request(scope, method=scope["method"], body=body)
        key = routing_key(request.path, body, self._max_segment_chars)
        has_started = False
        is_sse = False
        for attempt in range(NUM_ATTEMPTS):
            try:
                async for message in self._stream(request, key):
                    if message["type"] == "http.response.start":
                        has_started = True
                        message = _without_request_id(message)
                        is_sse = any(k == b"content-type" and v.startswith(b"text/event-stream")
                                     for k, v in message.get("headers", []))  # fmt: skip
                    await send(message)
                return
            except _REPLICA_GONE as exc:
                if has_started:
                    await _end_cut_stream(send, is_sse, exc)
                    return
                logger.warning("replica gone before answering (attempt %d): %s", attempt + 1, exc)
        await _send_error(send, ServiceUnavailableError("no replica answered; retry shortly"))

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # websocket.connect: the replica's app decides whether to accept
        session = uuid.uuid4().hex
        request = self._request(scope, session_id=session, relay=self._relay)
        pump = asyncio.ensure_future(self._pump(session, receive))
        has_accepted = False
        try:
            async for message in self._stream(request, None):
                has_accepted = has_accepted or message["type"] == "websocket.accept"
                await send(message)
        except _REPLICA_GONE as exc:
            logger.warning("replica gone mid-session: %s", exc)
            if has_accepted:
                _, body = _error_message(ServiceUnavailableError("the replica serving this session stopped; retry"))
                with contextlib.suppress(Exception):
                    await send({"type": "websocket.send", "text": json.dumps({"type": "error", **json.loads(body)})})
            await send({"type": "websocket.close", "code": 1011})
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            self._relay.close.remote(session)

    async def _pump(self, session: str, receive: Receive) -> None:
        """The client's messages into the relay, until it disconnects."""
        while True:
            message = await receive()
            await self._relay.put.remote(session, message)
            if message["type"] == "websocket.disconnect":
                return

    async def _metrics(self, send: Send) -> None:
        text = fleet_metrics.merge(await self._board.read.remote())
        headers = [(b"content-type", CONTENT_TYPE_LATEST.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": text.encode()})


def _without_request_id(start: Message) -> Message:
    """Ray's proxy adds ``X-Request-ID`` itself (the same id: it passed the request's on), so drop ours."""
    return {**start, "headers": [(k, v) for k, v in start.get("headers", []) if k.lower() != b"x-request-id"]}


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > MAX_BODY_BYTES:
            return None
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _end_cut_stream(send: Send, is_sse: bool, exc: BaseException) -> None:
    """A stream whose replica died: SSE gets an error event; a byte stream is cut (raise: no clean end)."""
    if not is_sse:
        raise ConnectionAbortedError("the replica serving this stream stopped") from exc
    _, body = _error_message(ServiceUnavailableError("the replica serving this stream stopped; retry"))
    event = f"data: {json.dumps({'type': 'error', **json.loads(body)})}\n\n".encode()
    await send({"type": "http.response.body", "body": event, "more_body": False})


class Ingress:
    """The deployment class: Ray builds the ASGI app per ingress replica (``__serve_build_asgi_app__``)."""

    def __init__(self, replicas: Any, max_segment_chars: int) -> None:
        self._replicas = replicas
        self._max_segment_chars = max_segment_chars

    def __serve_build_asgi_app__(self) -> IngressApp:
        return IngressApp(self._replicas, self._max_segment_chars)


def ingress_deployment() -> Any:
    return serve.ingress()(Ingress)
