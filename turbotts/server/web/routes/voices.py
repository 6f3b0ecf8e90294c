"""``/v1/voices``: list, save (JSON), clone from a clip (multipart) and delete named voices.

``GET /v1/audio/voices`` lists the same voices in the shape Kokoro-FastAPI and vLLM-Omni
clients read: ``voices`` (every name) and ``uploaded_voices`` (the saved ones, as objects).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response

from turbotts.server.schemas import ErrorResponse, VoiceList, VoiceOut
from turbotts.server.voices.store import Voice
from turbotts.server.web.deps import AccessDep, SettingsDep, VoiceServiceDep
from turbotts.server.web.uploads import CREATE_VOICE_BODY, check_consent, is_form, read_clip_upload, read_voice_json

router = APIRouter(prefix="/v1/voices", tags=["voices"])
audio_router = APIRouter(prefix="/v1/audio", tags=["voices"])
_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404, 409, 413, 422, 429)
}


def _out(voice: Voice) -> VoiceOut:
    return VoiceOut(
        name=voice.name,
        builtin=voice.is_builtin,
        kind=voice.kind,  # type: ignore[arg-type]
        seed=voice.seed,
        has_voice_string=voice.voice is not None,
        transcript=voice.transcript,
        has_audio=voice.has_audio,
        mix=voice.mix,
        created_at=voice.created_at,
        has_consent=voice.consent is not None,
    )


@router.get("", response_model=VoiceList, responses=_ERRORS)
async def list_voices(voices: VoiceServiceDep, _key: AccessDep) -> VoiceList:
    """Built-in (OpenAI names) and saved voices."""
    return VoiceList(data=[_out(v) for v in voices.list()])


@router.post("", response_model=VoiceOut, status_code=201, responses=_ERRORS, openapi_extra=CREATE_VOICE_BODY)
async def create_voice(request: Request, voices: VoiceServiceDep, settings: SettingsDep, _key: AccessDep) -> VoiceOut:
    """Save a voice: JSON (a seed, an official voice string, an ``spk_smp`` string with its transcript,
    or a mix), or multipart (``name``, ``audio`` clip, ``transcript``, optional ``keep_audio``) to clone one."""
    if is_form(request):
        upload = await read_clip_upload(request, settings.max_reference_bytes)
        check_consent(upload.consent, is_required=settings.require_voice_consent)
        voice = await asyncio.to_thread(
            voices.clone, upload.name, upload.audio, upload.transcript, keep_audio=upload.keep_audio,
            consent=upload.consent,
        )  # fmt: skip
        return _out(voice)
    body = await read_voice_json(request)
    check_consent(body.consent, is_required=settings.require_voice_consent)
    return _out(voices.create(body))


@router.delete("/{name}", status_code=204, responses=_ERRORS)
async def delete_voice(name: str, voices: VoiceServiceDep, _key: AccessDep) -> Response:
    voices.delete(name)
    return Response(status_code=204)


_AUDIO_VOICES_EXAMPLE = {
    "voices": ["alloy", "ash", "my_voice"],
    "uploaded_voices": [{"name": "my_voice", "kind": "reference", "ref_text": "Hello.", "has_consent": True}],
    "data": [{"name": "my_voice", "builtin": False, "kind": "reference"}],
}


@audio_router.get(
    "/voices",
    responses={200: {"content": {"application/json": {"example": _AUDIO_VOICES_EXAMPLE}}}, **_ERRORS},
)
async def list_audio_voices(voices: VoiceServiceDep, _key: AccessDep) -> dict[str, Any]:
    """Every voice name (``voices``, as Kokoro-FastAPI and vLLM-Omni list them), the saved ones as
    objects (``uploaded_voices``, vLLM-Omni's field) and the ``/v1/voices`` objects (``data``)."""
    listed = voices.list()
    saved = [voice for voice in listed if not voice.is_builtin]
    return {
        "voices": [voice.name for voice in listed],
        "uploaded_voices": [_uploaded(voice) for voice in saved],
        "data": [_out(voice).model_dump() for voice in listed],
    }


def _uploaded(voice: Voice) -> dict[str, Any]:
    """vLLM-Omni's ``uploaded_voices`` entry; ``has_consent`` stands for its ``consent`` (never the text)."""
    return {
        "name": voice.name,
        "kind": voice.kind,
        "ref_text": voice.transcript,
        "created_at": voice.created_at,
        "has_consent": voice.consent is not None,
    }
