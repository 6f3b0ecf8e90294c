"""Reading ``POST /v1/voices`` bodies: a multipart clip upload (bounded in size) or a JSON voice.

The body is read chunk by chunk and refused with 413 as soon as it passes the
limit, before any parsing, so an oversized upload costs no more than the limit in
memory. The JSON form keeps FastAPI's 422 answers (the route takes the raw request
because one path serves two content types).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from turbotts.errors import InvalidInputError, ReferenceAudioError, ReferenceTooLargeError
from turbotts.params import MAX_TRANSCRIPT_CHARS
from turbotts.server.schemas import CONSENT_DESCRIPTION, MAX_CONSENT_CHARS, VOICE_NAME_PATTERN, VoiceCreate

#: Room for the name, transcript and multipart framing on top of the clip itself.
FORM_OVERHEAD_BYTES = 64 * 1024
_NAME_RE = re.compile(VOICE_NAME_PATTERN)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


@dataclass(frozen=True)
class ClipUpload:
    name: str
    audio: bytes
    transcript: str
    keep_audio: bool
    consent: str | None = None


def is_form(request: Request) -> bool:
    """A form body (a clip upload), not JSON; a url-encoded form cannot carry the file and is refused."""
    content_type = request.headers.get("content-type", "").lower()
    return content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded"))


async def _bounded_body(request: Request, max_bytes: int) -> bytes:
    """Raises: ReferenceTooLargeError as soon as the body passes ``max_bytes``."""
    too_large = ReferenceTooLargeError(
        f"the upload is larger than {max_bytes} bytes (clip limit {max_bytes - FORM_OVERHEAD_BYTES}); "
        "upload a shorter clip or a compressed format (flac, mp3)"
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def read_clip_upload(request: Request, max_clip_bytes: int) -> ClipUpload:
    """The fields ``name``, ``audio`` (a file), ``transcript`` and optional ``keep_audio`` and ``consent``.

    Raises:
        ReferenceTooLargeError: the body is over the limit (413).
        ReferenceAudioError: no ``audio`` file part.
        InvalidInputError: a malformed form, or a missing or malformed name, transcript or keep_audio.
    """
    body = await _bounded_body(request, max_clip_bytes + FORM_OVERHEAD_BYTES)
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise ReferenceAudioError("a url-encoded form has no file; send multipart/form-data with the clip as 'audio'")

    async def stream() -> AsyncGenerator[bytes, None]:
        yield body

    try:
        form = await MultiPartParser(
            request.headers, stream(), max_files=1, max_fields=8, max_part_size=FORM_OVERHEAD_BYTES
        ).parse()
    except MultiPartException as exc:
        message = f"the multipart body cannot be read ({exc.message}); send fields name, audio, transcript"
        raise InvalidInputError(message) from exc
    audio = form.get("audio")
    if not isinstance(audio, UploadFile):
        raise ReferenceAudioError("the form has no audio file; send the clip as the file field 'audio'")
    data = await audio.read()
    await form.close()
    return ClipUpload(
        name=_text_field(form.get("name"), "name"),
        audio=data,
        transcript=_text_field(form.get("transcript"), "transcript"),
        keep_audio=_flag(form.get("keep_audio")),
        consent=_consent_field(form.get("consent")),
    )


def _consent_field(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_CONSENT_CHARS:
        error = InvalidInputError(f"the form field 'consent' must be 1-{MAX_CONSENT_CHARS} characters of text")
        error.param = "consent"  # type: ignore[attr-defined]
        raise error
    return value


def check_consent(consent: str | None, *, is_required: bool) -> None:
    """Raises: InvalidInputError (400, param ``consent``) when the server requires consent and none was sent."""
    if is_required and consent is None:
        error = InvalidInputError(
            "this server requires a consent statement to save a voice; send 'consent' (who agreed to their voice "
            "being saved, and when)"
        )
        error.param = "consent"  # type: ignore[attr-defined]
        raise error


def _text_field(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        error = InvalidInputError(f"the form field {field!r} is missing or empty; send it as a text field")
        error.param = field  # type: ignore[attr-defined]
        raise error
    if field == "name" and not _NAME_RE.match(value):
        error = InvalidInputError(
            f"the voice name {value[:80]!r} is not allowed; use 1-64 letters, digits, '_', '.' or '-'"
        )
        error.param = "name"  # type: ignore[attr-defined]
        raise error
    return value


def _flag(value: object) -> bool:
    if value is None:
        return False
    text = value.lower().strip() if isinstance(value, str) else "?"
    if text not in _TRUE | _FALSE:
        raise InvalidInputError(f"keep_audio must be true or false, got {text[:20]!r}")
    return text in _TRUE


async def read_voice_json(request: Request) -> VoiceCreate:
    """The JSON form, with FastAPI's 422 answers for a missing, malformed or invalid body."""
    body = await request.body()
    if not body:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    try:
        return VoiceCreate.model_validate_json(body)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error.get("loc", ()))} for error in exc.errors()]
        raise RequestValidationError(errors) from exc


#: OpenAPI request body of ``POST /v1/voices``: both content types.
CREATE_VOICE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": VoiceCreate.model_json_schema()},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["name", "audio", "transcript"],
                    "properties": {
                        "name": {"type": "string", "pattern": VOICE_NAME_PATTERN},
                        "audio": {"type": "string", "format": "binary", "description": "wav, flac, mp3, ogg, m4a"},
                        "transcript": {"type": "string", "maxLength": MAX_TRANSCRIPT_CHARS},
                        "keep_audio": {"type": "boolean", "default": False},
                        "consent": {
                            "type": "string",
                            "maxLength": MAX_CONSENT_CHARS,
                            "description": CONSENT_DESCRIPTION,
                        },
                    },
                }
            },
        },
    }
}
