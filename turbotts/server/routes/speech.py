"""``POST /v1/audio/speech``: OpenAI's speech endpoint, streamed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi import APIRouter

from turbotts.errors import TurboTTSError
from turbotts.server.audio_encoding import CONTENT_TYPES
from turbotts.server.deps import ApiKeyDep, RequestIdDep, ServiceDep
from turbotts.server.errors import describe
from turbotts.server.responses import ClosingStreamingResponse
from turbotts.server.schemas import ErrorResponse, SpeechRequest
from turbotts.server.service import SpeechJob, prime

router = APIRouter(tags=["speech"])
_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 422, 503)
}


@router.post(
    "/v1/audio/speech",
    responses={200: {"content": {"audio/mpeg": {}, "text/event-stream": {}}}, **_ERRORS},
    response_class=ClosingStreamingResponse,
)
async def create_speech(
    body: SpeechRequest, service: ServiceDep, request_id: RequestIdDep, _key: ApiKeyDep
) -> ClosingStreamingResponse:
    """Synthesize ``input``; audio bytes stream as they are made (or SSE events with ``stream_format="sse"``)."""
    job = service.speech(body, request_id)
    headers = {"X-TurboTTS-Warning": "; ".join(job.plan.warnings)} if job.plan.warnings else None
    if body.stream_format == "sse":
        return ClosingStreamingResponse(
            await prime(_sse_with_errors(job)), media_type="text/event-stream", headers=headers
        )
    media_type = CONTENT_TYPES[body.response_format]
    return ClosingStreamingResponse(await prime(job.encoded()), media_type=media_type, headers=headers)


async def _sse_with_errors(job: SpeechJob) -> AsyncIterator[str]:
    """SSE events; an error after the first event becomes an ``error`` event (the status is already sent)."""
    has_sent = False
    try:
        async for event in job.sse():
            has_sent = True
            yield event
    except TurboTTSError as exc:
        if not has_sent:
            raise
        _, body = describe(exc)
        yield f"data: {json.dumps({'type': 'error', **body})}\n\n"
