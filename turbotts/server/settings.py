"""Server settings: command-line flags, then ``TURBOTTS_*`` environment variables,
then an optional YAML, JSON or TOML file, then the defaults below (first wins).

The file is named by ``config_file`` (the ``--config`` flag or
``TURBOTTS_CONFIG_FILE``); its keys are the field names below.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from turbotts.config import EngineConfig
from turbotts.errors import InvalidInputError
from turbotts.model.loader import ModelSource

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
    device: str = "cpu"
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    # engine capacity
    max_batch_size: int = Field(default=16, ge=1)
    max_waiting: int = Field(default=1024, ge=1)
    kv_budget_bytes: int = Field(default=4 * 2**30, ge=1)
    max_seq_len: int = Field(default=2048, ge=16)

    # request limits and defaults
    max_input_chars: int = Field(default=4096, ge=1, description="Longer inputs get 413.")
    max_new_tokens: int = Field(default=2048, ge=1, le=4096, description="Code frames per segment (cap and default).")
    max_segment_chars: int = Field(default=120, ge=8, description="Long text is cut into segments of at most this.")
    max_segments_in_flight: int = Field(default=2, ge=1, le=8, description="Segments synthesized ahead, per request.")
    default_refine_text: bool = Field(default=False, description="The refine stage doubles time to first audio.")

    voices_db: Path = Path("~/.cache/turbotts/voices.sqlite3")
    api_keys: str = Field(default="", description="Comma-separated bearer keys; empty (and no file) = no auth.")
    api_key_file: Path | None = None
    shutdown_grace_s: float = Field(default=10.0, ge=0.0)

    @model_validator(mode="after")
    def _check_source(self) -> ServerSettings:
        self.model_source()  # raises CheckpointError on a contradiction (both --checkpoint and dummy)
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
        return ModelSource(checkpoint=self.checkpoint, load_format=self.load_format, dummy_size=self.dummy_size)

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            max_batch_size=self.max_batch_size,
            max_waiting=self.max_waiting,
            kv_budget_bytes=self.kv_budget_bytes,
            max_seq_len=self.max_seq_len,
        )

    def summary(self) -> str:
        """One log line; key material is never printed."""
        shown = self.model_dump(exclude={"api_keys"})
        shown["auth"] = bool(self.api_keys or self.api_key_file)
        return " ".join(f"{k}={v}" for k, v in shown.items())
