"""``POST /v1/audio/speech``: OpenAI's speech endpoint, streamed.

Beyond OpenAI's fields:

- ``speed`` (0.25..4.0) goes through :func:`split_speed`: a ``[speed_N]`` prompt token
  covers about 0.8..1.25, and a pitch-keeping time-stretch does the rest.
- ``instructions`` that name pace, laughter, pauses or casual style plainly (the table in
  :mod:`turbotts.text.instructions`), or are refine tokens only (``[oral_2][laugh_0][break_6]``),
  become speed and refine-prompt tokens; ``X-TurboTTS-Instructions`` (JSON: ``applied``,
  ``ignored``) and the SSE ``done`` event say which clauses were applied and which ignored, and
  ``X-TurboTTS-Warning`` says when any were not understood.
- ``refine_text`` defaults to off (``default_refine_text`` setting): the refine pass
  runs before any audio and roughly doubles time to first audio.
- ``seed``, ``temperature``, ``top_p``, ``top_k``, ``repetition_penalty`` and
  ``max_new_tokens`` (capped by the server) tune ChatTTS; control tokens in
  ``input`` pass through.

Responses carry ``X-Cache: l1|l2|miss`` (requests without a seed are never cached,
so always ``miss``), and ``X-TurboTTS-Degraded: fallback`` when admission control
answered with the fallback clip. Every response but ``flac`` streams: headers and the first bytes leave once the
first audio chunk exists, and a client that disconnects aborts its engine requests. ``flac`` is sent whole when
synthesis ends, because libsndfile cannot read a FLAC stream whose STREAMINFO says "length unknown".

Captions: the SSE stream also carries a ``speech.audio.segment`` event after each
segment's audio (``index``, ``text`` as spoken, ``start`` and ``end`` in seconds,
from sample counts), and ``POST /v1/audio/speech/captioned`` answers audio and
segments in one JSON object, or as NDJSON events with ``stream: true``. The one JSON
object is only sent at the end, so that route watches the connection meanwhile: a
client that disconnects aborts its engine requests there too.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from turbotts.errors import TurboTTSError
from turbotts.server.audio.encoding import CONTENT_TYPES
from turbotts.server.schemas import CaptionedSpeech, CaptionedSpeechRequest, ErrorResponse, SpeechRequest
from turbotts.server.speech.job import SpeechJob
from turbotts.server.web.deps import AccessDep, RequestIdDep, ServiceDep
from turbotts.server.web.errors import describe
from turbotts.server.web.responses import ClosingStreamingResponse, prime

router = APIRouter(tags=["speech"])
_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 422, 429, 503)
}


@router.post(
    "/v1/audio/speech",
    responses={
        200: {"content": {**{media: {} for media in CONTENT_TYPES.values()}, "text/event-stream": {}}},
        **_ERRORS,
    },
    response_class=ClosingStreamingResponse,
    status_code=200,
)
async def create_speech(
    body: SpeechRequest, service: ServiceDep, request_id: RequestIdDep, _key: AccessDep
) -> ClosingStreamingResponse:
    """Synthesize ``input``; audio bytes stream as they are made (or SSE events with ``stream_format="sse"``)."""
    job = await service.speech(body, request_id)
    headers = _headers(job)
    if body.stream_format == "sse":
        return ClosingStreamingResponse(
            await prime(_events_with_errors(job, _sse)), media_type="text/event-stream", headers=headers
        )
    media_type = CONTENT_TYPES[body.response_format]
    return ClosingStreamingResponse(await prime(job.encoded()), media_type=media_type, headers=headers)


@router.post(
    "/v1/audio/speech/captioned",
    response_model=CaptionedSpeech,
    responses={200: {"content": {"application/x-ndjson": {}}}, **_ERRORS},
    status_code=200,
)
async def create_captioned_speech(
    body: CaptionedSpeechRequest, request: Request, service: ServiceDep, request_id: RequestIdDep, _key: AccessDep
) -> Response:
    """Synthesize ``input``; answer the audio (base64) with each segment's text and times, or stream them as NDJSON."""
    job = await service.speech(body, request_id)
    headers = _headers(job)
    if body.stream:
        return ClosingStreamingResponse(
            await prime(_events_with_errors(job, _ndjson)), media_type="application/x-ndjson", headers=headers
        )
    collected = await _collected_unless_gone(job, request)
    if collected is None:  # the client left; nobody reads this answer (499: nginx's "client closed request")
        return Response(status_code=499)
    audio, captions = collected
    result = CaptionedSpeech.model_validate({
        "audio": base64.b64encode(audio).decode("ascii"), "response_format": body.response_format,
        "segments": [caption.as_dict() for caption in captions], "usage": job.usage(),
    })  # fmt: skip
    return JSONResponse(result.model_dump(exclude_unset=True), headers=headers)  # a voice only where named


async def _collected_unless_gone(job: SpeechJob, request: Request) -> tuple[bytes, list[Any]] | None:
    """The job's whole audio and captions, or None once the client disconnects (synthesis is then aborted)."""
    collecting = asyncio.ensure_future(job.collected())
    watching = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({collecting, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (collecting, watching):
            task.cancel()  # cancelling the collection closes the pipeline, which aborts the engine requests
        await asyncio.wait({collecting, watching})
    if collecting.cancelled():
        return None
    return collecting.result()


async def _disconnected(request: Request) -> None:
    """Returns when the client disconnects (the body has been read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _headers(job: SpeechJob) -> dict[str, str]:
    headers: dict[str, str] = {"X-Cache": job.cache_level or "miss"}
    if job.resolved.warnings:
        headers["X-TurboTTS-Warning"] = "; ".join(job.resolved.warnings)
    if job.resolved.instructions is not None:  # ASCII JSON: the clauses as written, escaped
        headers["X-TurboTTS-Instructions"] = json.dumps(job.resolved.instructions.report(), separators=(",", ":"))
    if job.is_degraded:
        headers["X-TurboTTS-Degraded"] = "fallback"
    return headers


def _sse(event: dict[str, Any]) -> str:
    return f"data: {json.dumps(event)}\n\n"


def _ndjson(event: dict[str, Any]) -> str:
    return json.dumps(event) + "\n"


async def _events_with_errors(job: SpeechJob, render: Callable[[dict[str, Any]], str]) -> AsyncIterator[str]:
    """Rendered events; an error after the first event becomes an ``error`` event (the status is already sent)."""
    has_sent = False
    try:
        async for event in job.events():
            has_sent = True
            yield render(event)
    except TurboTTSError as exc:
        if not has_sent:
            raise
        _, body = describe(exc)
        yield render({"type": "error", **body})
