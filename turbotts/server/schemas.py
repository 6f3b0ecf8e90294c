"""Request and response bodies, one per purpose.

:class:`SpeechRequest` is a strict superset of OpenAI's ``/v1/audio/speech``
body: every OpenAI field keeps its meaning, and ChatTTS knobs (seed, sampling,
refine_text, max_new_tokens) are optional extras.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
MAX_SEED = 2**63 - 1
VOICE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


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

    id: str = Field(min_length=1, max_length=100_000)


class SynthesisOptions(Utf8Model):
    """The ChatTTS extras shared by HTTP and WebSocket requests."""

    model_config = ConfigDict(extra="forbid")

    voice: str | VoiceRef = Field(
        default="alloy",
        description="A built-in (OpenAI) or saved voice name, {'id': name}, or an official voice string.",
    )
    response_format: ResponseFormat = "mp3"
    speed: float = Field(
        default=1.0,
        ge=0.25,
        le=4.0,
        description="ChatTTS's [speed_N] prompt token covers part of the range; the rest is a pitch-keeping "
        "time-stretch of the audio.",
    )
    instructions: str | None = Field(
        default=None,
        max_length=4096,
        description="Accepted for compatibility. Made only of ChatTTS refine tokens (e.g. "
        "'[oral_2][laugh_0][break_6]') it becomes the refine prompt (effective with refine_text=true); "
        "anything else is ignored and reported in the X-TurboTTS-Warning header.",
    )
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED, description="Same seed, same voice and text: same audio.")
    temperature: float | None = Field(default=None, gt=0.0, le=5.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=1, le=1000)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=10.0)
    max_new_tokens: int | None = Field(
        default=None, ge=1, le=4096, description="Code frames per segment (21.3 ms each); capped by the server."
    )
    refine_text: bool | None = Field(
        default=None, description="Run the refine-text stage first; off by default (it slows the first audio)."
    )


class SpeechRequest(SynthesisOptions):
    """``POST /v1/audio/speech``."""

    model: str = Field(
        default="tts-1", max_length=200, description="tts-1, tts-1-hd, gpt-4o-mini-tts, chattts or turbotts."
    )
    input: str = Field(description="Text to say; ChatTTS control tokens such as [uv_break] pass through.")
    input_format: Literal["text", "ssml"] | None = Field(
        default=None,
        description="ssml: input is an SSML document (the subset in docs/http/ssml.md); text: plain text, markup "
        "stripped; unset: SSML when input starts with <speak>, else text.",
    )
    stream_format: Literal["audio", "sse"] = "audio"


class CaptionedSpeechRequest(SpeechRequest):
    """``POST /v1/audio/speech/captioned``: the speech body, answered with audio and its segment times."""

    stream: bool = Field(
        default=False,
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


class VoiceCreate(Utf8Model):
    """``POST /v1/voices`` as JSON: exactly one of ``seed``, ``voice``, ``spk_smp`` (with
    ``transcript``) and ``mix``. A clip upload is multipart instead (fields name, audio, transcript)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=VOICE_NAME_PATTERN)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    voice: str | None = Field(default=None, min_length=1, max_length=100_000, description="An official voice string.")
    spk_smp: str | None = Field(
        default=None, min_length=1, max_length=200_000, description="An official audio-prompt string (a clip's codes)."
    )
    transcript: str | None = Field(default=None, min_length=1, description="The words spoken in the spk_smp clip.")
    mix: str | None = Field(default=None, min_length=1, max_length=1000, description="Like alloy*0.7+nova*0.3.")

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
