"""``/v1/voices``: list, save (JSON), clone from a clip (multipart) and delete named voices."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response

from turbotts.server.schemas import ErrorResponse, VoiceList, VoiceOut
from turbotts.server.voices.store import Voice
from turbotts.server.web.deps import AccessDep, SettingsDep, VoiceServiceDep
from turbotts.server.web.uploads import CREATE_VOICE_BODY, is_form, read_clip_upload, read_voice_json

router = APIRouter(prefix="/v1/voices", tags=["voices"])
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
        voice = await asyncio.to_thread(
            voices.clone, upload.name, upload.audio, upload.transcript, keep_audio=upload.keep_audio
        )
        return _out(voice)
    return _out(voices.create(await read_voice_json(request)))


@router.delete("/{name}", status_code=204, responses=_ERRORS)
async def delete_voice(name: str, voices: VoiceServiceDep, _key: AccessDep) -> Response:
    voices.delete(name)
    return Response(status_code=204)
