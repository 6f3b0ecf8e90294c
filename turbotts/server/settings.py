"""Server settings: command-line flags, then ``TURBOTTS_*`` environment variables,
then an optional YAML, JSON or TOML file, then the defaults below (first wins).

This class is the one place a server setting is declared: its name, type, default,
bounds and help (``description``, required). The ``turbotts serve`` flag (``--name-with-dashes``),
the environment variable (``TURBOTTS_NAME``), the file key (the name) and the row on the docs'
configuration page are all derived from the field (``turbotts/server/settings_reference.py``);
its ``json_schema_extra`` gives its group and any older flag spellings kept working. Code that a
setting feeds calls it by the same name.

The file is named by ``config_file`` (the ``--config`` flag or
``TURBOTTS_CONFIG_FILE``); its keys are the field names below.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import SecretStr, field_validator, model_validator
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
from turbotts.fidelity.thresholds import GateThresholds
from turbotts.guard.keys import parse_secret_key
from turbotts.server.settings_guard_fields import GuardAndScaleFields
from turbotts.sources import ModelSource

ENV_PREFIX = "TURBOTTS_"
_FILE_SOURCES: dict[str, Any] = {
    ".yaml": lambda cls, path: YamlConfigSettingsSource(cls, yaml_file=path),
    ".yml": lambda cls, path: YamlConfigSettingsSource(cls, yaml_file=path),
    ".json": lambda cls, path: JsonConfigSettingsSource(cls, json_file=path),
    ".toml": lambda cls, path: TomlConfigSettingsSource(cls, toml_file=path),
}


class ServerSettings(GuardAndScaleFields, BaseSettings):
    """Everything ``turbotts serve`` can be told, one field per setting (declared in
    :mod:`~turbotts.server.settings_fields` and :mod:`~turbotts.server.settings_guard_fields`). Frozen once built."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

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
            scheduling=self.scheduling,
            playback_buffer_s=self.playback_buffer_s,
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
