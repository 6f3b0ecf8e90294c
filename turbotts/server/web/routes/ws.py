"""``/v1/audio/speech/ws``: text arrives in pieces (an LLM's stream), audio leaves in order.

Protocol (docs/http/streaming.md; message models in :mod:`turbotts.server.web.ws_protocol`):
``config`` (or ``session.config``) first, then ``text`` (``input.text``) pieces or whole SSML
documents; ``input.done`` ends an utterance and keeps the connection open for the next one,
``end`` (``session.close``) ends the last one and closes. The server answers each utterance with
binary audio frames in order, ``speech.audio.segment`` messages when ``captions`` is on, and
``{"type": "done", "utterance": n, "usage": ...}``. A problem is
``{"type": "error", "error": {...}}`` followed by a close: 1003 for a binary frame, 1008 for a
bad message, 1011 for a server fault, 4008 when the connection was idle for ``ws_idle_timeout_s``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from turbotts.errors import IdleTimeoutError, InvalidInputError, TurboTTSError, UnsupportedFrameError
from turbotts.server.ops.context import request_id_var
from turbotts.server.speech.service import SpeechService
from turbotts.server.web.deps import ServiceDep, check_rate_limit, require_api_key
from turbotts.server.web.errors import describe, error_body
from turbotts.server.web.ws_protocol import (
    CONFIG,
    IDLE_CLOSE_CODE,
    Boundary,
    Inbox,
    Message,
    SessionConfig,
    parse,
)

router = APIRouter(tags=["speech"])
logger = logging.getLogger(__name__)


@router.websocket("/v1/audio/speech/ws")
async def speech_ws(websocket: WebSocket, service: ServiceDep) -> None:
    await websocket.accept()
    inbox = Inbox(websocket, service.settings.ws_idle_timeout_s)
    try:
        await check_rate_limit(websocket, require_api_key(websocket))
        config = parse(CONFIG, await inbox.next_text())
        await _Session(websocket, service, inbox, config, request_id_var.get()).run()
        await inbox.stop()
        await websocket.close()
    except WebSocketDisconnect:
        return
    except IdleTimeoutError as exc:
        message = f"{exc}; the connection is closed. Send text, input.done or session.close sooner"
        await _close(websocket, error_body(message, "invalid_request_error", "idle_timeout"), IDLE_CLOSE_CODE)
    except TurboTTSError as exc:
        await _fail(websocket, exc)
    except Exception as exc:  # a bug must still end the session with an error message and a close code
        logger.exception("WebSocket session failed")
        await _fail(websocket, exc)
    finally:
        await inbox.stop()


class _Session:
    """One connection: utterance after utterance, each a :meth:`SpeechService.text_stream` job."""

    def __init__(
        self, websocket: WebSocket, service: SpeechService, inbox: Inbox, config: SessionConfig, request_id: str
    ) -> None:
        self.websocket = websocket
        self.service = service
        self.inbox = inbox
        self.config = config
        self.request_id = request_id
        self._boundary: Boundary | None = None

    async def run(self) -> None:
        """Utterances until ``end`` or ``session.close``; one right after ``input.done`` adds no empty utterance.

        The first utterance's job is made at once, so a bad config (an unknown voice) is answered before any text.
        """
        index, first = 0, None
        while not (await self._utterance(index, first)).is_final:
            index += 1
            first = await self.inbox.next_message()
            if isinstance(first, Boundary) and first.is_final:
                return

    async def _utterance(self, index: int, first: Message | None) -> Boundary:
        """Speak one utterance (``first``: its first message when already read); returns the message that ended it."""
        self._boundary = None
        request_id = self.request_id if index == 0 else f"{self.request_id}.u{index}"
        job = self.service.text_stream(self.config, self._pieces(first), request_id, self.config.input_format)
        async for data, captions in job.captioned():
            if data:
                await self.websocket.send_bytes(data)
                self.inbox.touch()  # a client listening to audio is not idle
            if self.config.captions:
                for caption in captions:
                    await self.websocket.send_json({**caption.event(), "utterance": index})
        await self.websocket.send_json({"type": "done", "utterance": index, "usage": job.usage()})
        if self._boundary is None:  # the job ends only once its pieces have
            raise RuntimeError("the utterance ended before its input did")
        return self._boundary

    async def _pieces(self, first: Message | None) -> AsyncIterator[str]:
        """Text of the utterance's messages until a boundary; more than ``max_input_chars`` per piece is refused."""
        max_chars = self.service.settings.max_input_chars
        message = first if first is not None else await self.inbox.next_message()
        while True:
            if isinstance(message, Boundary):
                self._boundary = message
                return
            if isinstance(message, SessionConfig):
                raise InvalidInputError("config (session.config) is sent once, as the first message")
            if len(message.text) > max_chars:
                raise InvalidInputError(f"a text message holds at most {max_chars} characters")
            yield message.text
            message = await self.inbox.next_message()


async def _fail(websocket: WebSocket, exc: Exception) -> None:
    """Send the error message and close; the client may be gone already."""
    _, body = describe(exc)
    code = 1003 if isinstance(exc, UnsupportedFrameError) else 1008 if isinstance(exc, InvalidInputError) else 1011
    await _close(websocket, body, code)


async def _close(websocket: WebSocket, body: dict[str, object], code: int) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):  # RuntimeError: the socket is closed already
        await websocket.send_json({"type": "error", **body})
        await websocket.close(code=code, reason="idle timeout" if code == IDLE_CLOSE_CODE else None)
