"""Server settings: command-line flags, then ``TURBOTTS_*`` environment variables,
then an optional YAML, JSON or TOML file, then the defaults below (first wins).

The file is named by ``config_file`` (the ``--config`` flag or
``TURBOTTS_CONFIG_FILE``); its keys are the field names below.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from turbotts.audio import ReferenceLimits
from turbotts.config import EngineConfig
from turbotts.errors import InvalidInputError
from turbotts.fidelity.gate import GateThresholds
from turbotts.guard.keys import parse_secret_key
from turbotts.server.audio.encoding import BIT_RATE_RANGES_KBPS, DEFAULT_BIT_RATES_KBPS
from turbotts.sources import ModelSource

ENV_PREFIX = "TURBOTTS_"
_FILE_SOURCES: dict[str, Any] = {
    ".yaml": lambda cls, path: YamlConfigSettingsSource(cls, yaml_file=path),
    ".yml": lambda cls, path: YamlConfigSettingsSource(cls, yaml_file=path),
    ".json": lambda cls, path: JsonConfigSettingsSource(cls, json_file=path),
    ".toml": lambda cls, path: TomlConfigSettingsSource(cls, toml_file=path),
}


class ServerSettings(BaseSettings):
    """Everything ``turbotts serve`` can be told. Frozen once built."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

    config_file: Path | None = None

    # where the weights come from (default: the official release)
    checkpoint: Path | None = None
    load_format: Literal["auto", "dummy"] = "auto"
    dummy_size: Literal["tiny", "full"] = "tiny"
    key_env: str | None = None  # sealed checkpoint: the environment variable that holds its AES key
    public_key: Path | None = None  # Ed25519 PEM that signed the checkpoint (sealed: required; plain: verified)
    device: str = "cpu"
    # auto: the fastest mode here that passes the start-up quality gate against fp32 (turbotts/fidelity/gate.py);
    # quant none is the bit-exact mode
    dtype: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    quant: Literal["none", "int8", "auto"] = "auto"
    vocoder_dtype: Literal["auto", "fp32", "bf16"] = "auto"
    #: the gate: a faster mode's teacher-forced top-1 code agreement with fp32, at least this
    gate_min_code_agreement: float = Field(default=0.90, ge=0.0, le=1.0)
    #: the gate: MCD (dB) of its audio against fp32's from the same codes, at most this
    gate_max_mcd_db: float = Field(default=4.0, gt=0.0)
    kv_dtype: Literal["auto", "fp32", "bf16"] = "auto"  # auto: bf16 under the fused int8 decode stack

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    # engine capacity
    max_batch_size: int = Field(default=16, ge=1)
    max_waiting: int = Field(default=1024, ge=1)
    kv_budget_bytes: int = Field(default=4 * 2**30, ge=1)
    max_seq_len: int = Field(default=2048, ge=16)

    # real-time admission of streams (README "Real-time admission")
    admission: Literal["realtime", "off"] = Field(
        default="realtime", description="realtime: start a stream only while every stream keeps real time."
    )
    realtime_margin: float = Field(default=0.2, ge=0.0, description="Headroom over real time (0.2 = 20 %).")
    max_queue_wait_s: float = Field(default=30.0, ge=0.0, description="Refuse a longer-waiting stream; 0 = never.")
    realtime_capacity_override: int | None = Field(default=None, ge=0, description="Fixed capacity, in streams.")

    # request limits and defaults
    max_input_chars: int = Field(default=4096, ge=1, description="Longer inputs get 413.")
    max_new_tokens: int = Field(default=2048, ge=1, le=4096, description="Code frames per segment (cap and default).")
    max_segment_chars: int = Field(default=120, ge=8, description="Long text is cut into segments of at most this.")
    max_segments_in_flight: int = Field(default=2, ge=1, le=8, description="Segments synthesized ahead, per request.")
    default_refine_text: bool = Field(default=False, description="The refine stage doubles time to first audio.")

    voices_db: Path = Path("~/.cache/turbotts/voices.sqlite3")
    reference_min_s: float = Field(default=1.0, gt=0.0, description="Shorter reference clips get 400.")
    reference_max_s: float = Field(default=30.0, gt=0.0, description="Longer reference clips get 400.")
    max_reference_bytes: int = Field(default=10 * 2**20, ge=1, description="Larger clip uploads get 413.")
    api_keys: str = Field(default="", description="Comma-separated bearer keys; empty (and no file) = no auth.")
    api_key_file: Path | None = None
    shutdown_grace_s: float = Field(default=10.0, ge=0.0)
    log_format: Literal["json", "text"] = Field(default="json", description="json: one redacted object per line.")

    # lossy response formats: less bandwidth for less quality (the watermark survives 64 kbit/s)
    mp3_bit_rate_kbps: int = Field(
        default=DEFAULT_BIT_RATES_KBPS["mp3"], ge=BIT_RATE_RANGES_KBPS["mp3"][0], le=BIT_RATE_RANGES_KBPS["mp3"][1]
    )
    opus_bit_rate_kbps: int = Field(
        default=DEFAULT_BIT_RATES_KBPS["opus"], ge=BIT_RATE_RANGES_KBPS["opus"][0], le=BIT_RATE_RANGES_KBPS["opus"][1]
    )
    aac_bit_rate_kbps: int = Field(
        default=DEFAULT_BIT_RATES_KBPS["aac"], ge=BIT_RATE_RANGES_KBPS["aac"][0], le=BIT_RATE_RANGES_KBPS["aac"][1]
    )

    # production guards (README "Production guards")
    redis_url: SecretStr | None = Field(default=None, description="Shared L2 cache and rate limits; unset = local.")
    cache_max_bytes: int = Field(default=256 * 2**20, ge=0, description="L1 audio cache budget; 0 turns it off.")
    cache_ttl_s: float = Field(default=3600.0, gt=0.0)
    redis_cache_ttl_s: float = Field(default=86400.0, gt=0.0, description="L2 entries live this long, +-5 %.")
    rate_limit_rps: float = Field(default=10.0, ge=0.0, description="Per client IP and per API key; 0 = no limit.")
    rate_limit_burst: int = Field(default=20, ge=0)
    blocklist: Path | None = Field(default=None, description="One blocked term per line; reload: SIGHUP or admin.")
    watermark: bool = Field(default=True, description="Mark every synthesized waveform (--no-watermark: off).")
    watermark_key: SecretStr | None = Field(default=None, description="32 bytes as 64 hex digits or base64.")
    watermark_key_id: int = Field(default=0, ge=0, le=255)
    admission_window_s: float = Field(default=2.0, ge=0.0, description="Pressure must last this long to refuse.")
    admission_max_waiting: int = Field(default=512, ge=0, description="0 = off.")
    admission_min_free_slots: int = Field(default=0, ge=0, description="0 = off.")
    admission_max_rss_bytes: int | None = Field(default=None, ge=0, description="None: 90 % of RAM; 0 = off.")
    admission_max_device_fraction: float = Field(default=0.95, ge=0.0, le=1.0, description="0 = off.")
    admission_retry_after_s: float = Field(default=2.0, gt=0.0)
    ttfa_slo_s: float = Field(default=1.0, gt=0.0)
    ttfa_max_slow_ratio: float = Field(default=0.05, ge=0.0, lt=1.0)
    ttfa_window_s: float = Field(default=30.0, gt=0.0)
    ttfa_min_requests: int = Field(default=20, ge=1)
    degrade_mode: Literal["off", "shed", "fallback"] = "off"
    fallback_clip: Path | None = Field(default=None, description="Audio file answered in degrade_mode=fallback.")

    # live quality monitor (README "Operating it"): off unless a baseline is given
    quality_baseline: Path | None = Field(default=None, description="`turbotts quality check` baseline to re-measure.")
    quality_interval_s: float = Field(default=300.0, gt=0.0, description="Pause between quality rounds.")
    quality_threshold_db: float = Field(default=0.2, ge=0.0, description="Mean MCD above which the monitor warns.")

    # scale-out (README "Scale-out on Ray Serve"); the default backend is one process
    backend: Literal["process", "ray"] = Field(default="process", description="ray: replicas behind Ray Serve.")
    voice_store: Literal["auto", "sqlite", "redis"] = Field(
        default="auto", description="auto: Redis on the ray backend when redis_url is set, else voices_db (SQLite)."
    )
    replicas: int = Field(default=1, ge=1, description="Fixed replica count (ignored with max_replicas).")
    min_replicas: int = Field(default=1, ge=0, description="Autoscaling floor (with max_replicas).")
    max_replicas: int | None = Field(default=None, ge=1, description="Set: autoscale between min and max.")
    target_ongoing_requests: float = Field(default=8.0, gt=0.0, description="Autoscaling target per replica.")
    max_ongoing_requests: int | None = Field(
        default=None, ge=1, description="Requests a replica takes at once; None: max_batch_size (the engine's)."
    )
    ray_address: str | None = Field(default=None, description="auto or ray://host:10001; unset: a local cluster.")
    replica_num_cpus: float = Field(default=1.0, gt=0.0, description="CPUs Ray reserves per replica.")
    replica_num_gpus: float = Field(default=0.0, ge=0.0, description="GPUs Ray reserves per replica.")
    replica_threads: int | None = Field(default=None, ge=1, description="torch threads per replica; None: torch's.")
    affinity_imbalance: int = Field(
        default=4, ge=0, description="Queue-length lead beyond which cache affinity yields to the least loaded."
    )
    cache_aware_routing: bool = Field(default=True, description="False: Ray's default power-of-two router.")

    @field_validator("watermark_key")
    @classmethod
    def _check_watermark_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            try:
                parse_secret_key(value.get_secret_value(), "watermark_key")
            except InvalidInputError as exc:
                raise ValueError(str(exc)) from exc
        return value

    @model_validator(mode="after")
    def _check_source(self) -> ServerSettings:
        self.model_source()  # raises CheckpointError on a contradiction (both --checkpoint and dummy)
        if self.degrade_mode == "fallback" and self.fallback_clip is None:
            raise InvalidInputError("degrade_mode=fallback needs fallback_clip (an audio file to answer with)")
        self.reference_limits()  # raises InvalidInputError unless min < max
        if self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise InvalidInputError("min_replicas must not exceed max_replicas")
        if self.voice_store == "redis" and self.redis_url is None:
            raise InvalidInputError("voice_store=redis needs redis_url (the Redis that holds the voices)")
        if self.rate_limit_rps > 0 and self.rate_limit_burst < 1:
            raise InvalidInputError("rate_limit_burst must be at least 1 when rate_limit_rps > 0 (0 rps turns it off)")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        init_kwargs = getattr(init_settings, "init_kwargs", {})
        path = init_kwargs.get("config_file") or os.environ.get(f"{ENV_PREFIX}CONFIG_FILE")
        if not path:
            return (init_settings, env_settings)
        path = Path(path).expanduser()
        factory = _FILE_SOURCES.get(path.suffix.lower())
        if factory is None:
            raise InvalidInputError(f"--config {path}: use a .yaml, .yml, .json or .toml file")
        if not path.is_file():
            raise InvalidInputError(f"--config {path} does not exist; fix the path")
        return (init_settings, env_settings, factory(settings_cls, path))

    def model_source(self) -> ModelSource:
        return ModelSource(
            checkpoint=self.checkpoint,
            load_format=self.load_format,
            dummy_size=self.dummy_size,
            sealed_key_env=self.key_env,
            public_key=self.public_key,
        )

    def gate_thresholds(self) -> GateThresholds:
        return GateThresholds(self.gate_min_code_agreement, self.gate_max_mcd_db)

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            max_batch_size=self.max_batch_size,
            max_waiting=self.max_waiting,
            kv_budget_bytes=self.kv_budget_bytes,
            max_seq_len=self.max_seq_len,
            vocoder_dtype=self.vocoder_dtype,
            kv_dtype=self.kv_dtype,
            admission=self.admission,
            realtime_margin=self.realtime_margin,
            max_queue_wait_s=self.max_queue_wait_s,
            realtime_capacity_override=self.realtime_capacity_override,
        )

    def reference_limits(self) -> ReferenceLimits:
        return ReferenceLimits(
            min_s=self.reference_min_s, max_s=self.reference_max_s, max_bytes=self.max_reference_bytes
        )

    def uses_redis_voices(self) -> bool:
        """Voices in Redis (shared by every replica) rather than in this process's SQLite file."""
        if self.voice_store == "auto":
            return self.backend == "ray" and self.redis_url is not None
        return self.voice_store == "redis"

    def replica_concurrency(self) -> int:
        """Requests one replica takes at once: the engine's batch unless set (Ray's default of 5 would queue)."""
        return self.max_ongoing_requests or self.max_batch_size

    def bit_rate_kbps(self, fmt: str) -> int | None:
        """The configured bit rate of a lossy ``response_format``; None for the lossless ones."""
        return {"mp3": self.mp3_bit_rate_kbps, "opus": self.opus_bit_rate_kbps, "aac": self.aac_bit_rate_kbps}.get(fmt)

    def summary(self) -> str:
        """One log line; key material is never printed."""
        shown = self.model_dump(exclude={"api_keys", "watermark_key", "redis_url"})
        shown["redis"] = self.redis_url is not None
        shown["auth"] = bool(self.api_keys or self.api_key_file)
        return " ".join(f"{k}={v}" for k, v in shown.items())
