"""``/v1/voices``: list, save and delete named voices."""

from __future__ import annotations

from fastapi import APIRouter, Response

from turbotts.server.deps import AccessDep, VoiceServiceDep
from turbotts.server.schemas import ErrorResponse, VoiceCreate, VoiceList, VoiceOut
from turbotts.server.voices import Voice

router = APIRouter(prefix="/v1/voices", tags=["voices"])
_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404, 409, 422, 429)
}


def _out(voice: Voice) -> VoiceOut:
    return VoiceOut(
        name=voice.name,
        builtin=voice.is_builtin,
        seed=voice.seed,
        has_voice_string=voice.voice is not None,
        created_at=voice.created_at,
    )


@router.get("", response_model=VoiceList, responses=_ERRORS)
async def list_voices(voices: VoiceServiceDep, _key: AccessDep) -> VoiceList:
    """Built-in (OpenAI names) and saved voices."""
    return VoiceList(data=[_out(v) for v in voices.list()])


@router.post("", response_model=VoiceOut, status_code=201, responses=_ERRORS)
async def create_voice(body: VoiceCreate, voices: VoiceServiceDep, _key: AccessDep) -> VoiceOut:
    """Save a voice from a seed or an official voice string; it survives restarts."""
    return _out(voices.create(body))


@router.delete("/{name}", status_code=204, responses=_ERRORS)
async def delete_voice(name: str, voices: VoiceServiceDep, _key: AccessDep) -> Response:
    voices.delete(name)
    return Response(status_code=204)
