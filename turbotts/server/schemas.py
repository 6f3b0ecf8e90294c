"""Request and response bodies, one per purpose.

:class:`SpeechRequest` is a strict superset of OpenAI's ``/v1/audio/speech``
body: every OpenAI field keeps its meaning, and ChatTTS knobs (seed, sampling,
refine_text, max_new_tokens) are optional extras.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
MAX_SEED = 2**63 - 1
VOICE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
#: what a request's voice may be, as the schema states it: a name (an unknown one is a 404), an official voice
#: string (base16384: U+4E00..U+8DFF and a length mark; one that does not decode is a 400), or a mix (holds + or *)
VOICE_PATTERN = VOICE_NAME_PATTERN + r"|^[\u4e00-\u8dff]+[\u3d01-\u3d06]?$|[+*]"
_VOICE_DESCRIPTION = (
    "A built-in (OpenAI) or saved voice name (an unknown one is a 404), a mix like alloy*0.7+nova*0.3 (a malformed "
    "one is a 400), or an official voice string (base16384; one that does not decode to this model's voice is a 400)."
)


def _integral(value: Any) -> Any:
    """JSON Schema's ``integer`` holds ``2.0``: an integral float is that integer; anything else is left to the
    field's strict ``int`` (which refuses ``true``/``false`` and strings: plain ``int`` took ``true`` as 1)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class Utf8Model(BaseModel):
    """A body whose strings are all valid Unicode.

    JSON may spell a lone UTF-16 surrogate (``"\\ud800"``), which Python keeps in a
    ``str`` but no UTF-8 encoder takes: hashing, the tokenizer and the logs would fail
    deep inside the request with a 500. Refused here, as a 422 naming the field.
    """

    @field_validator("*", mode="after")
    @classmethod
    def _encodable(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(
                    f"holds a lone UTF-16 surrogate (\\u{ord(value[exc.start]):04x}) at character {exc.start}; "
                    "send valid Unicode text"
                ) from None
        return value


class VoiceRef(Utf8Model):
    """OpenAI's object form of a voice: ``{"id": "alloy"}``."""

    id: str = Field(
        min_length=1, max_length=100_000, description=_VOICE_DESCRIPTION, json_schema_extra={"pattern": VOICE_PATTERN}
    )


class SynthesisOptions(Utf8Model):
    """The ChatTTS extras shared by HTTP and WebSocket requests."""

    model_config = ConfigDict(extra="forbid")

    voice: str | VoiceRef = Field(
        default="alloy",
        description=_VOICE_DESCRIPTION + " Or {'id': voice}.",
        json_schema_extra={"pattern": VOICE_PATTERN},  # a string anything else is a 400 (not a voice string)
    )
    response_format: ResponseFormat = "mp3"
    speed: float = Field(
        default=1.0,
        ge=0.25,
        le=4.0,
        strict=True,
        description="A JSON number (true/false and strings are refused). ChatTTS's [speed_N] prompt token covers "
        "part of the range; the rest is a pitch-keeping time-stretch of the audio.",
    )
    instructions: str | None = Field(
        default=None,
        max_length=4096,
        description="Clauses naming pace (slowly, fast: speed x 0.8 or x 1.25), laughter ([laugh_2]), pauses "
        "([break_6]) or casual style ([oral_2]) plainly, or ChatTTS refine tokens only ('[oral_2][break_6]'); "
        "refine tokens turn refine_text on unless it is false. What was applied and ignored is in the "
        "X-TurboTTS-Instructions header (and the SSE done event); anything not understood is reported in "
        "X-TurboTTS-Warning. Never refused.",
    )
    seed: int | None = Field(
        default=None, ge=0, le=MAX_SEED, strict=True,
        description="A JSON integer (true/false and strings are refused). Same seed, same voice and text: "
        "same audio.",
    )  # fmt: skip
    temperature: float | None = Field(default=None, gt=0.0, le=5.0, strict=True)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, strict=True)
    top_k: int | None = Field(default=None, ge=1, le=1000, strict=True)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=10.0, strict=True)
    max_new_tokens: int | None = Field(
        default=None, ge=1, le=4096, strict=True,
        description="Code frames per segment (21.3 ms each); a value above the server's max_new_tokens setting "
        "is capped to it, not refused.",
    )  # fmt: skip
    refine_text: bool | None = Field(
        default=None, strict=True,
        description="Run the refine-text stage first; off by default (it slows the first audio).",
    )  # fmt: skip
    playback_buffer_s: float | None = Field(
        default=None, ge=0.0, le=30.0, strict=True,
        description="Seconds of audio your player buffers before it plays (default: the server's "
        "playback_buffer_s setting). A streamed request's deadlines follow it: the scheduler runs the streams "
        "nearest to running dry first.",
    )  # fmt: skip

    _json_integers = field_validator("seed", "top_k", "max_new_tokens", mode="before")(_integral)


class SpeechRequest(SynthesisOptions):
    """``POST /v1/audio/speech``."""

    model: str = Field(
        default="tts-1", max_length=200, description="tts-1, tts-1-hd, gpt-4o-mini-tts, chattts or turbotts."
    )
    input: str = Field(
        description="Text to say; ChatTTS control tokens such as [uv_break] pass through. At most the server's "
        "max_input_chars characters (longer: 413), with at least one letter or digit (else 400). Also a 400: "
        "text with nothing speakable once markup, emoji, symbols and control tokens are removed, and SSML that "
        "is not well-formed or outside the subset.",
        json_schema_extra={"pattern": r"[^\W_]"},  # as Python's str.isalnum(): what split_input needs (a 400)
    )
    input_format: Literal["text", "ssml"] | None = Field(
        default=None,
        description="ssml: input is an SSML document (the subset in docs/http/ssml.md); text: plain text, markup "
        "stripped; unset: SSML when input starts with <?xml or <speak>, else text.",
    )
    stream_format: Literal["audio", "sse"] = "audio"


class CaptionedSpeechRequest(SpeechRequest):
    """``POST /v1/audio/speech/captioned``: the speech body, answered with audio and its segment times."""

    stream: bool = Field(
        default=False,
        strict=True,
        description="false: one JSON object (base64 audio and every segment); true: NDJSON events as they are made "
        "(speech.audio.delta, speech.audio.segment, speech.audio.done). stream_format is not used here.",
    )


class WsConfig(SynthesisOptions):
    """First message of ``/v1/audio/speech/ws``."""

    type: Literal["config"]
    response_format: ResponseFormat = "pcm"


class WsText(Utf8Model):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str = Field(max_length=100_000)


class WsEnd(Utf8Model):
    model_config = ConfigDict(extra="forbid")
    type: Literal["end"]


MAX_CONSENT_CHARS = 2000
CONSENT_DESCRIPTION = (
    "Who consented to this voice being saved (e.g. 'recorded and cloned with the consent of Jane Doe, 2026-01-05'); "
    "required when the server runs with require_voice_consent. Stored with the voice, never logged or listed."
)


def _one_voice_source() -> list[dict[str, Any]]:
    """:class:`VoiceCreate`'s rule in the schema: exactly one source given (not null), and the transcript with
    ``spk_smp`` only."""
    kinds = {"seed": "integer", "voice": "string", "spk_smp": "string", "transcript": "string", "mix": "string"}
    branches: list[dict[str, Any]] = []
    for name in ("seed", "voice", "spk_smp", "mix"):
        given = [name, "transcript"] if name == "spk_smp" else [name]  # present and not null; the rest null or absent
        properties = {field: {"type": kind if field in given else "null"} for field, kind in kinds.items()}
        branches.append({"required": given, "properties": properties})
    return branches


class VoiceCreate(Utf8Model):
    """``POST /v1/voices`` as JSON: exactly one of ``seed``, ``voice``, ``spk_smp`` (with
    ``transcript``) and ``mix``. A clip upload is multipart instead (fields name, audio, transcript)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"oneOf": cast(Any, _one_voice_source())})

    name: str = Field(pattern=VOICE_NAME_PATTERN)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED, strict=True)
    voice: str | None = Field(default=None, min_length=1, max_length=100_000, description="An official voice string.")
    spk_smp: str | None = Field(
        default=None, min_length=1, max_length=200_000, description="An official audio-prompt string (a clip's codes)."
    )
    transcript: str | None = Field(default=None, min_length=1, description="The words spoken in the spk_smp clip.")
    mix: str | None = Field(default=None, min_length=1, max_length=1000, description="Like alloy*0.7+nova*0.3.")

    _json_integer = field_validator("seed", mode="before")(_integral)
    consent: str | None = Field(
        default=None, min_length=1, max_length=MAX_CONSENT_CHARS, description=CONSENT_DESCRIPTION
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> VoiceCreate:
        given = [f for f in ("seed", "voice", "spk_smp", "mix") if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of seed and voice, or spk_smp (with transcript), or mix")
        if (self.spk_smp is None) != (self.transcript is None):
            raise ValueError("spk_smp and transcript go together: the transcript is what the clip says")
        return self


class VoiceOut(BaseModel):
    name: str
    builtin: bool
    kind: Literal["seed", "voice", "reference", "mix"] = "seed"
    seed: int | None = None
    has_voice_string: bool = False
    transcript: str | None = Field(default=None, description="What a reference clip says (kind=reference).")
    has_audio: bool = Field(default=False, description="The clip itself was kept (keep_audio=true).")
    mix: str | None = None
    created_at: float = 0.0
    has_consent: bool = Field(default=False, description="A consent statement was stored (its text is never shown).")


class VoiceList(BaseModel):
    object: Literal["list"] = "list"
    data: list[VoiceOut]


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class CaptionSegment(BaseModel):
    """One segment as spoken and where it lies in the audio (seconds, from sample counts)."""

    index: int
    text: str
    start: float
    end: float
    voice: str | None = Field(
        default=None, description="The voice that speaks it; present only when an SSML <voice> names voices."
    )


class CaptionedSpeech(BaseModel):
    """Audio (base64 of ``response_format``) and its segments."""

    audio: str
    response_format: ResponseFormat
    segments: list[CaptionSegment]
    usage: Usage


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Readiness(BaseModel):
    """What ``/readyz`` adds when ready: the engine's real-time admission state."""

    admission: Literal["realtime", "off"]
    realtime_capacity_streams: int  # streams kept at or above real time plus margin
    is_capacity_measured: bool  # False until a decode step was timed (then one stream may start, as a probe)
    step_ms_by_batch: dict[int, float]  # the measured mean step time per batch size it learned from
    running_sequences: int
    waiting_sequences: int


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    detail: str | None = None


class Ready(Health):
    """``/readyz``: the health, and when ready the engine's admission state."""

    details: Readiness | None = None


class Reloaded(BaseModel):
    status: Literal["reloaded"]
