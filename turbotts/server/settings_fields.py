"""The fields of :class:`~turbotts.server.settings.ServerSettings` that shape serving: the server,
the model source, precision, engine capacity, real-time admission, requests and voices.

Why a module apart: each field carries its help and group, which makes the one declaration long;
``ServerSettings`` is still the one model (it inherits these), and every field is written once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from pydantic.json_schema import JsonDict

from turbotts.server.audio.encoding import BIT_RATE_RANGES_KBPS, DEFAULT_BIT_RATES_KBPS
from turbotts.text.segment import DEFAULT_MAX_SEGMENT_CHARS


def in_group(group: str, *flag_aliases: str) -> JsonDict:
    """A field's ``json_schema_extra``: its group (``serve --help`` panels, the docs' sections) and any older
    flag spellings that keep working besides the one derived from its name (see ``settings_reference``)."""
    extra: JsonDict = {"group": group}
    if flag_aliases:
        extra["flag_aliases"] = list(flag_aliases)
    return extra


_SERVER = in_group("Server")
_SOURCE = in_group("Model source")
_PRECISION = in_group("Precision and the quality gate")
_ENGINE = in_group("Engine capacity")
_REALTIME = in_group("Real-time admission")
_REQUESTS = in_group("Requests and responses")
_VOICES = in_group("Voices")
_ACCESS = in_group("API keys and rate limits")
_CACHE = in_group("Audio cache")
_CONTENT = in_group("Blocklist and watermark")
_OVERLOAD = in_group("Overload protection")
_QUALITY = in_group("Live quality monitor")
_SCALEOUT = in_group("Scale-out on Ray Serve")


class ServingFields(BaseModel):
    """Where the weights come from and how requests are served (see ``ServerSettings``)."""

    config_file: Path | None = Field(
        default=None,
        description="YAML, JSON or TOML file of settings; its keys are the setting names (port: 8000).",
        json_schema_extra=in_group("Server", "--config"),
    )
    host: str = Field(default="127.0.0.1", description="Interface to listen on.", json_schema_extra=_SERVER)
    port: int = Field(
        default=8000, ge=0, le=65535, description="TCP port (0: any free one).", json_schema_extra=_SERVER
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Log records of this level and above.", json_schema_extra=_SERVER
    )
    log_format: Literal["json", "text"] = Field(
        default="json", description="json: one redacted object per line.", json_schema_extra=_SERVER
    )
    shutdown_grace_s: float = Field(
        default=10.0,
        ge=0.0,
        description="On SIGTERM, in-flight requests get this long to finish.",
        json_schema_extra=_SERVER,
    )

    # where the weights come from (default: the official release)
    checkpoint: Path | None = Field(
        default=None,
        description="Checkpoint directory in the 2Noise/ChatTTS layout (holds asset/); unset: the official weights.",
        json_schema_extra=_SOURCE,
    )
    load_format: Literal["auto", "dummy"] = Field(
        default="auto",
        description="auto: checkpoint or the official weights; dummy: random.",
        json_schema_extra=_SOURCE,
    )
    dummy_size: Literal["tiny", "full"] = Field(
        default="tiny", description="Size of the random weights of load_format dummy.", json_schema_extra=_SOURCE
    )
    key_env: str | None = Field(
        default=None,
        description="Sealed checkpoint: the environment variable that holds its AES key (never the key itself).",
        json_schema_extra=_SOURCE,
    )
    public_key: Path | None = Field(
        default=None,
        description="Ed25519 PEM that signed the checkpoint (sealed: required; plain: verified).",
        json_schema_extra=_SOURCE,
    )
    device: str = Field(default="cpu", description="cpu, cuda or cuda:N.", json_schema_extra=_SOURCE)

    # auto: the fastest mode here that passes the start-up quality gate against fp32 (turbotts/fidelity/gate.py)
    dtype: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        default="auto",
        description="GPT precision; auto: the fastest that passes the start-up quality gate against fp32.",
        json_schema_extra=_PRECISION,
    )
    quant: Literal["none", "int8", "auto"] = Field(
        default="auto",
        description="GPT weights; auto: int8 where faster and it passes the quality gate; none is bit-exact.",
        json_schema_extra=_PRECISION,
    )
    vocoder_dtype: Literal["auto", "fp32", "bf16"] = Field(
        default="auto",
        description="Decoder/Vocos precision; auto: bf16 where faster and it passes the quality gate.",
        json_schema_extra=_PRECISION,
    )
    kv_dtype: Literal["auto", "fp32", "bf16"] = Field(
        default="auto",
        description="KV cache storage; auto: bf16 under the fused int8 decode stack, else the GPT's dtype.",
        json_schema_extra=_PRECISION,
    )
    gate_min_code_agreement: float = Field(
        default=0.90,
        ge=0.0,
        le=1.0,
        description="The gate: a faster mode's teacher-forced top-1 code agreement with fp32, at least this.",
        json_schema_extra=_PRECISION,
    )
    gate_max_mcd_db: float = Field(
        default=4.0,
        gt=0.0,
        description="The gate: MCD (dB) of its audio against fp32's from the same codes, at most this.",
        json_schema_extra=_PRECISION,
    )

    # engine capacity
    max_batch_size: int = Field(
        default=16, ge=1, description="Sequences decoded together in one step.", json_schema_extra=_ENGINE
    )
    max_waiting: int = Field(
        default=1024, ge=1, description="Queued sequences before new work is refused.", json_schema_extra=_ENGINE
    )
    kv_budget_bytes: int = Field(
        default=4 * 2**30,
        ge=1,
        description="Memory the KV cache may take; it decides the slot count.",
        json_schema_extra=_ENGINE,
    )
    max_seq_len: int = Field(
        default=2048, ge=16, description="Tokens (prompt + generated) one sequence may hold.", json_schema_extra=_ENGINE
    )

    # real-time admission of streams (docs/operations/guards.md, "Real-time admission")
    admission: Literal["realtime", "off"] = Field(
        default="realtime",
        description="realtime: start a stream only while every stream keeps real time.",
        json_schema_extra=_REALTIME,
    )
    realtime_margin: float = Field(
        default=0.2, ge=0.0, description="Headroom over real time (0.2 = 20 %).", json_schema_extra=_REALTIME
    )
    max_queue_wait_s: float = Field(
        default=30.0, ge=0.0, description="Refuse a longer-waiting stream; 0 = never.", json_schema_extra=_REALTIME
    )
    realtime_capacity_override: int | None = Field(
        default=None,
        ge=0,
        description="Fixed capacity, in streams; unset: learned from measured step times.",
        json_schema_extra=in_group("Real-time admission", "--realtime-capacity"),
    )
    scheduling: Literal["deadline", "fifo"] = Field(
        default="deadline",
        description="deadline: past the real-time batch, decode the streams nearest their listeners' "
        "deadlines first; fifo: every running stream every step.",
        json_schema_extra=_REALTIME,
    )
    playback_buffer_s: float = Field(
        default=1.0,
        ge=0.0,
        le=30.0,
        description="Audio a client's player buffers, for streams whose request does not say.",
        json_schema_extra=_REALTIME,
    )

    # request limits and defaults
    max_input_chars: int = Field(default=4096, ge=1, description="Longer inputs get 413.", json_schema_extra=_REQUESTS)
    ws_idle_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="A WebSocket with no client message and no audio sent for this long is closed (code 4008).",
        json_schema_extra=_REQUESTS,
    )
    max_new_tokens: int = Field(
        default=2048,
        ge=1,
        le=4096,
        description="Code frames per segment (cap and default).",
        json_schema_extra=_REQUESTS,
    )
    max_segment_chars: int = Field(
        default=DEFAULT_MAX_SEGMENT_CHARS,
        ge=8,
        description="Long text is cut into segments of at most this.",
        json_schema_extra=_REQUESTS,
    )
    max_segments_in_flight: int = Field(
        default=2, ge=1, le=8, description="Segments synthesized ahead, per request.", json_schema_extra=_REQUESTS
    )
    default_refine_text: bool = Field(
        default=False, description="The refine stage doubles time to first audio.", json_schema_extra=_REQUESTS
    )
    # lossy response formats: less bandwidth for less quality (the watermark survives 64 kbit/s)
    mp3_bit_rate_kbps: int = Field(
        default=DEFAULT_BIT_RATES_KBPS["mp3"],
        ge=BIT_RATE_RANGES_KBPS["mp3"][0],
        le=BIT_RATE_RANGES_KBPS["mp3"][1],
        description="Bit rate of mp3 responses.",
        json_schema_extra=_REQUESTS,
    )
    opus_bit_rate_kbps: int = Field(
        default=DEFAULT_BIT_RATES_KBPS["opus"],
        ge=BIT_RATE_RANGES_KBPS["opus"][0],
        le=BIT_RATE_RANGES_KBPS["opus"][1],
        description="Bit rate of opus responses (the watermark survives 64 kbit/s).",
        json_schema_extra=_REQUESTS,
    )
    aac_bit_rate_kbps: int = Field(
        default=DEFAULT_BIT_RATES_KBPS["aac"],
        ge=BIT_RATE_RANGES_KBPS["aac"][0],
        le=BIT_RATE_RANGES_KBPS["aac"][1],
        description="Bit rate of aac responses.",
        json_schema_extra=_REQUESTS,
    )

    # voices
    voices_db: Path = Field(
        default=Path("~/.cache/turbotts/voices.sqlite3"),
        description="SQLite file of saved voices (unless they are in Redis: voice_store).",
        json_schema_extra=_VOICES,
    )
    voice_store: Literal["auto", "sqlite", "redis"] = Field(
        default="auto",
        description="auto: Redis on the ray backend when redis_url is set, else voices_db (SQLite).",
        json_schema_extra=_VOICES,
    )
    reference_min_s: float = Field(
        default=1.0, gt=0.0, description="Shorter reference clips get 400.", json_schema_extra=_VOICES
    )
    reference_max_s: float = Field(
        default=30.0, gt=0.0, description="Longer reference clips get 400.", json_schema_extra=_VOICES
    )
    max_reference_bytes: int = Field(
        default=10 * 2**20, ge=1, description="Larger clip uploads get 413.", json_schema_extra=_VOICES
    )
