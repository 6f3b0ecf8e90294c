"""The WebSocket's messages: their models, parsing, and the inbox that reads them with an idle clock.

Two spellings of each client message are accepted, today's and vLLM-Omni's streaming-TTS
names (docs/http/streaming.md has the table):

- ``config`` / ``session.config``: the speech options, once, first; plus ``captions`` and ``input_format``;
- ``text`` / ``input.text``: a piece of text, or a whole SSML document;
- ``input.done``: the current utterance is complete; the connection stays open for the next one;
- ``end`` / ``session.close``: finish the current utterance and close.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from turbotts.errors import IdleTimeoutError, InvalidInputError, UnsupportedFrameError
from turbotts.server.schemas import Utf8Model, WsConfig

IDLE_CLOSE_CODE = 4008  # an application code (4000-4999), after HTTP's 408 Request Timeout
T = TypeVar("T")


class SessionConfig(WsConfig):
    """``config`` or ``session.config``: the speech options of every utterance of the connection."""

    type: Literal["config", "session.config"]  # type: ignore[assignment]  # a wider literal than WsConfig's
    captions: bool = Field(default=False, description="Send a speech.audio.segment message after each segment.")
    input_format: Literal["text", "ssml"] | None = Field(
        default=None, description="ssml: every text message is an SSML document; unset: SSML when it looks like one."
    )


class TextPiece(Utf8Model):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text", "input.text"]
    text: str = Field(max_length=100_000)


class Boundary(Utf8Model):
    """``input.done`` (the utterance is complete, stay open), ``end`` or ``session.close`` (finish and close)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["input.done", "end", "session.close"]

    @property
    def is_final(self) -> bool:
        return self.type != "input.done"


Message = TextPiece | Boundary | SessionConfig
CONFIG: TypeAdapter[SessionConfig] = TypeAdapter(SessionConfig)
MESSAGE: TypeAdapter[Message] = TypeAdapter(Annotated[Message, Field(discriminator="type")])
_TAGS = frozenset({"text", "input.text", "input.done", "end", "session.close", "config", "session.config"})


def parse(adapter: TypeAdapter[T], raw: str) -> T:
    """Raises: InvalidInputError naming the field and the problem."""
    try:
        return adapter.validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"][1:] if first["loc"] and first["loc"][0] in _TAGS else first["loc"]  # drop the union tag
        where = ".".join(str(p) for p in loc) or "message"
        raise InvalidInputError(f"bad WebSocket message ({where}: {first['msg']}); see the protocol") from exc


class Inbox:
    """The client's messages, read by one task into a short queue, and the connection's idle clock.

    The clock restarts on every client message and every audio frame sent (:meth:`touch`), so a
    client listening to a long answer is not idle. The queue is short, so a client that sends
    faster than the server speaks is slowed by TCP, not buffered without bound.
    """

    def __init__(self, websocket: WebSocket, idle_timeout_s: float) -> None:
        self.idle_timeout_s = idle_timeout_s
        self._websocket = websocket
        self._queue: asyncio.Queue[Mapping[str, Any]] = asyncio.Queue(maxsize=16)
        self._last_activity_s = time.monotonic()
        self._reader = asyncio.create_task(self._read())

    def touch(self) -> None:
        self._last_activity_s = time.monotonic()

    async def next_text(self) -> str:
        """The next text message.

        Raises:
            WebSocketDisconnect: the client went away.
            UnsupportedFrameError: a binary frame (the protocol is JSON text).
            IdleTimeoutError: nothing came and nothing was sent for ``idle_timeout_s``.
        """
        message = await self._next()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
        text = message.get("text")
        if text is None:
            raise UnsupportedFrameError("binary frames are not part of this protocol; send JSON text messages")
        return str(text)

    async def next_message(self) -> Message:
        """The next message after ``config``, parsed. Raises: as :meth:`next_text`, and InvalidInputError."""
        return parse(MESSAGE, await self.next_text())

    async def stop(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def _next(self) -> Mapping[str, Any]:
        while True:
            with contextlib.suppress(asyncio.QueueEmpty):
                return self._queue.get_nowait()  # a message that came is never an idle connection's
            remaining_s = self._last_activity_s + self.idle_timeout_s - time.monotonic()
            if remaining_s <= 0:
                raise IdleTimeoutError(f"no message for {self.idle_timeout_s:g} s")
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(self._queue.get(), remaining_s)

    async def _read(self) -> None:
        while True:
            try:
                message = await self._websocket.receive()
            except (RuntimeError, WebSocketDisconnect):  # the socket is closed already
                message = {"type": "websocket.disconnect", "code": 1006}
            self.touch()  # when it arrives, not when the session gets to it
            await self._queue.put(message)
            if message["type"] == "websocket.disconnect":
                return
