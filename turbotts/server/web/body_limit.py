"""Request bodies limited while they arrive: 413 after at most the limit plus one chunk.

A pure ASGI middleware. It counts the body's bytes as the server receives them and,
once they pass the limit, answers 413 (a JSON error naming the limit) and tells
the route the client is gone, so no route ever holds more than the limit plus one
network chunk in memory. A ``Content-Length`` above the limit is answered before
any byte of the body is read. The limits:

- voice uploads (``/v1/voices``): ``max_reference_bytes`` plus the form's overhead;
- every other body (speech JSON): :func:`json_body_limit` of ``max_input_chars``, generous
  enough for the longest input written entirely in ``\\uXXXX`` escapes plus a voice
  string and the other fields.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turbotts.server.web.errors import error_body
from turbotts.server.web.uploads import FORM_OVERHEAD_BYTES

#: Room for the fields beside ``input``: a voice string (up to 100 000 characters), instructions, options.
JSON_FIELDS_BYTES = 2**20
#: The most bytes one character of ``input`` takes in JSON: a surrogate pair as two ``\\uXXXX`` escapes.
_BYTES_PER_CHAR = 12
_UPLOAD_PREFIX = "/v1/voices"
_BODYLESS = frozenset({"GET", "HEAD", "OPTIONS"})


def json_body_limit(max_input_chars: int) -> int:
    return _BYTES_PER_CHAR * max_input_chars + JSON_FIELDS_BYTES


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_input_chars: int, max_reference_bytes: int) -> None:
        self.app = app
        self.json_limit = json_body_limit(max_input_chars)
        self.max_reference_bytes = max_reference_bytes

    def _limit(self, path: str) -> tuple[int, str, str]:
        """The limit for ``path``, its error code and what to do about it."""
        if path == _UPLOAD_PREFIX or path.startswith(_UPLOAD_PREFIX + "/"):
            limit = self.max_reference_bytes + FORM_OVERHEAD_BYTES
            advice = (
                f"clip limit {self.max_reference_bytes} (max_reference_bytes); upload a shorter clip or a "
                "compressed format (flac, mp3)"
            )
            return limit, "reference_too_large", advice
        advice = (
            f"a request of up to {(self.json_limit - JSON_FIELDS_BYTES) // _BYTES_PER_CHAR} input characters "
            "(max_input_chars) and its other fields; send shorter input"
        )
        return self.json_limit, "request_too_large", advice

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _BODYLESS:
            await self.app(scope, receive, send)
            return
        limit, code, advice = self._limit(str(scope["path"]))
        message = f"the request body is larger than {limit} bytes, the limit for {advice}"
        declared = dict(scope.get("headers", [])).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _too_large(send, message, code)
            return
        received = 0
        has_started = False
        has_answered = False

        async def limited_receive() -> Message:
            nonlocal received, has_answered
            if has_answered:
                return {"type": "http.disconnect"}
            message_in = await receive()
            if message_in["type"] == "http.request":
                received += len(message_in.get("body", b""))
                if received > limit:
                    if not has_started:
                        await _too_large(send, message, code)
                    has_answered = True  # the route reads a disconnect and stops; its answer is dropped
                    return {"type": "http.disconnect"}
            return message_in

        async def tracked_send(message_out: Message) -> None:
            nonlocal has_started
            if has_answered:
                return
            if message_out["type"] == "http.response.start":
                has_started = True
            await send(message_out)

        try:
            await self.app(scope, limited_receive, tracked_send)
        except Exception:
            if not has_answered:  # a route failing on the disconnect we made up is not an error
                raise


async def _too_large(send: Send, message: str, code: str) -> None:
    body: dict[str, Any] = error_body(message, "invalid_request_error", code)
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": data})
