"""``/v1/audio/speech/ws``: text arrives in pieces (an LLM's stream), audio leaves in order.

Protocol: ``{"type": "config", ...}`` first (the speech options, ``response_format``
pcm by default), then any number of ``{"type": "text", "text": ...}``, then
``{"type": "end"}``. The server answers with binary audio frames in order and a
final ``{"type": "done", "usage": ...}``; a problem is ``{"type": "error", "error": {...}}``
followed by a close.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TypeVar

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import TypeAdapter, ValidationError

from turbotts.errors import InvalidInputError, TurboTTSError
from turbotts.server.context import request_id_var
from turbotts.server.deps import ServiceDep, check_rate_limit, require_api_key
from turbotts.server.errors import describe
from turbotts.server.schemas import WsConfig, WsEnd, WsText

router = APIRouter(tags=["speech"])
_CONFIG = TypeAdapter(WsConfig)
_MESSAGE: TypeAdapter[WsText | WsEnd] = TypeAdapter(WsText | WsEnd)
T = TypeVar("T")


@router.websocket("/v1/audio/speech/ws")
async def speech_ws(websocket: WebSocket, service: ServiceDep) -> None:
    await websocket.accept()
    try:
        await check_rate_limit(websocket, require_api_key(websocket))
        config = _parse(_CONFIG, await websocket.receive_text())
        pieces = _text_pieces(websocket, service.settings.max_input_chars)
        job = service.text_stream(config, pieces, request_id_var.get())
        async for frame in job.encoded():
            await websocket.send_bytes(frame)
        await websocket.send_json({"type": "done", "usage": job.usage()})
        await websocket.close()
    except WebSocketDisconnect:
        return
    except TurboTTSError as exc:
        _, body = describe(exc)
        await websocket.send_json({"type": "error", **body})
        await websocket.close(code=1008 if isinstance(exc, InvalidInputError) else 1011)


async def _text_pieces(websocket: WebSocket, max_chars: int) -> AsyncIterator[str]:
    """Text of the client's messages until ``end``; more than ``max_chars`` per piece is refused."""
    while True:
        message = _parse(_MESSAGE, await websocket.receive_text())
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
        where = ".".join(str(p) for p in first["loc"]) or "message"
        raise InvalidInputError(f"bad WebSocket message ({where}: {first['msg']}); see the protocol") from exc
