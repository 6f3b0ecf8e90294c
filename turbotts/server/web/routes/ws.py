"""``/v1/audio/speech/ws``: text arrives in pieces (an LLM's stream), audio leaves in order.

Protocol: ``{"type": "config", ...}`` first (the speech options, ``response_format``
pcm by default), then any number of ``{"type": "text", "text": ...}``, then
``{"type": "end"}``. The server answers with binary audio frames in order and a
final ``{"type": "done", "usage": ...}``; a problem is ``{"type": "error", "error": {...}}``
followed by a close: 1003 for a binary frame, 1008 for a bad message, 1011 for a server
fault. Messages after ``end`` are not read.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, TypeVar

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import Field, TypeAdapter, ValidationError

from turbotts.errors import InvalidInputError, TurboTTSError, UnsupportedFrameError
from turbotts.server.ops.context import request_id_var
from turbotts.server.schemas import WsConfig, WsEnd, WsText
from turbotts.server.web.deps import ServiceDep, check_rate_limit, require_api_key
from turbotts.server.web.errors import describe

router = APIRouter(tags=["speech"])
_CONFIG = TypeAdapter(WsConfig)
_MESSAGE: TypeAdapter[WsText | WsEnd] = TypeAdapter(Annotated[WsText | WsEnd, Field(discriminator="type")])
_TAGS = ("text", "end")
T = TypeVar("T")
logger = logging.getLogger(__name__)


@router.websocket("/v1/audio/speech/ws")
async def speech_ws(websocket: WebSocket, service: ServiceDep) -> None:
    await websocket.accept()
    try:
        await check_rate_limit(websocket, require_api_key(websocket))
        config = _parse(_CONFIG, await _receive_text(websocket))
        pieces = _text_pieces(websocket, service.settings.max_input_chars)
        job = service.text_stream(config, pieces, request_id_var.get())
        async for frame in job.encoded():
            await websocket.send_bytes(frame)
        await websocket.send_json({"type": "done", "usage": job.usage()})
        await websocket.close()
    except WebSocketDisconnect:
        return
    except TurboTTSError as exc:
        await _fail(websocket, exc)
    except Exception as exc:  # a bug must still end the session with an error message and a close code
        logger.exception("WebSocket session failed")
        await _fail(websocket, exc)


async def _fail(websocket: WebSocket, exc: Exception) -> None:
    """Send the error message and close; the client may be gone already."""
    _, body = describe(exc)
    code = 1003 if isinstance(exc, UnsupportedFrameError) else 1008 if isinstance(exc, InvalidInputError) else 1011
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):  # RuntimeError: the socket is closed already
        await websocket.send_json({"type": "error", **body})
        await websocket.close(code=code)


async def _receive_text(websocket: WebSocket) -> str:
    """The next text message.

    Raises:
        WebSocketDisconnect: the client went away.
        UnsupportedFrameError: a binary frame (the protocol is JSON text).
    """
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
    text = message.get("text")
    if text is None:
        raise UnsupportedFrameError("binary frames are not part of this protocol; send JSON text messages")
    return str(text)


async def _text_pieces(websocket: WebSocket, max_chars: int) -> AsyncIterator[str]:
    """Text of the client's messages until ``end``; more than ``max_chars`` per piece is refused."""
    while True:
        message = _parse(_MESSAGE, await _receive_text(websocket))
        if isinstance(message, WsEnd):
            return
        if len(message.text) > max_chars:
            raise InvalidInputError(f"a text message holds at most {max_chars} characters")
        yield message.text


def _parse(adapter: TypeAdapter[T], raw: str) -> T:
    try:
        return adapter.validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"][1:] if first["loc"] and first["loc"][0] in _TAGS else first["loc"]  # drop the union tag
        where = ".".join(str(p) for p in loc) or "message"
        raise InvalidInputError(f"bad WebSocket message ({where}: {first['msg']}); see the protocol") from exc
