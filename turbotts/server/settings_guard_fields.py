"""The fields of :class:`~turbotts.server.settings.ServerSettings` that guard and scale the server:
access, the audio cache, the blocklist and watermark, overload, the quality monitor and Ray scale-out.

Why a module apart: see :mod:`turbotts.server.settings_fields`; these fields are still declared once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr

from turbotts.server.settings_fields import (
    _ACCESS,
    _CACHE,
    _CONTENT,
    _OVERLOAD,
    _QUALITY,
    _SCALEOUT,
    ServingFields,
)


class GuardAndScaleFields(ServingFields):
    """The production guards and scale-out (see ``ServerSettings``)."""

    # production guards (docs/operations/guards.md)
    api_keys: str = Field(
        default="", description="Comma-separated bearer keys; empty (and no file) = no auth.", json_schema_extra=_ACCESS
    )
    api_key_file: Path | None = Field(
        default=None, description="Bearer keys, one per line (besides api_keys).", json_schema_extra=_ACCESS
    )
    rate_limit_rps: float = Field(
        default=10.0, ge=0.0, description="Per client IP and per API key; 0 = no limit.", json_schema_extra=_ACCESS
    )
    rate_limit_burst: int = Field(
        default=20,
        ge=0,
        description="Token bucket size: requests a client may send at once.",
        json_schema_extra=_ACCESS,
    )
    require_voice_consent: bool = Field(
        default=False,
        description="Voice uploads (POST /v1/voices) must carry a consent statement, else 422.",
        json_schema_extra=_ACCESS,
    )
    redis_url: SecretStr | None = Field(
        default=None, description="Shared L2 cache and rate limits; unset = local.", json_schema_extra=_CACHE
    )
    cache_max_bytes: int = Field(
        default=256 * 2**20, ge=0, description="L1 audio cache budget; 0 turns it off.", json_schema_extra=_CACHE
    )
    cache_ttl_s: float = Field(
        default=3600.0, gt=0.0, description="L1 entries live this long.", json_schema_extra=_CACHE
    )
    redis_cache_ttl_s: float = Field(
        default=86400.0, gt=0.0, description="L2 entries live this long, +-5 %.", json_schema_extra=_CACHE
    )
    blocklist: Path | None = Field(
        default=None, description="One blocked term per line; reload: SIGHUP or admin.", json_schema_extra=_CONTENT
    )
    watermark: bool = Field(
        default=True, description="Mark every synthesized waveform (--no-watermark: off).", json_schema_extra=_CONTENT
    )
    watermark_key: SecretStr | None = Field(
        default=None,
        description="32 bytes as 64 hex digits or base64; unset: a random key per process.",
        json_schema_extra=_CONTENT,
    )
    watermark_key_id: int = Field(
        default=0,
        ge=0,
        le=255,
        description="Key id carried in every mark, for the detector to pick the key.",
        json_schema_extra=_CONTENT,
    )

    # overload: pressure refuses new work, a broken TTFA SLO degrades (turbotts/guard/admission.py)
    admission_window_s: float = Field(
        default=2.0, ge=0.0, description="Pressure must last this long to refuse.", json_schema_extra=_OVERLOAD
    )
    admission_max_waiting: int = Field(
        default=512,
        ge=0,
        description="Refuse while more sequences wait for a batch slot; 0 = off.",
        json_schema_extra=_OVERLOAD,
    )
    admission_min_free_slots: int = Field(
        default=0, ge=0, description="Refuse while fewer KV slots are free; 0 = off.", json_schema_extra=_OVERLOAD
    )
    admission_max_rss_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Refuse while the process's RSS is above; None: 90 % of RAM; 0 = off.",
        json_schema_extra=_OVERLOAD,
    )
    admission_max_device_fraction: float = Field(
        default=0.95,
        ge=0.0,
        le=1.0,
        description="Refuse while more of the GPU's memory is allocated; 0 = off.",
        json_schema_extra=_OVERLOAD,
    )
    admission_retry_after_s: float = Field(
        default=2.0, gt=0.0, description="Retry-After of a refused request.", json_schema_extra=_OVERLOAD
    )
    ttfa_slo_s: float = Field(
        default=1.0, gt=0.0, description="Time-to-first-audio objective of one request.", json_schema_extra=_OVERLOAD
    )
    ttfa_max_slow_ratio: float = Field(
        default=0.05,
        ge=0.0,
        lt=1.0,
        description="Share of requests that may miss ttfa_slo_s before it breaks.",
        json_schema_extra=_OVERLOAD,
    )
    ttfa_window_s: float = Field(
        default=30.0, gt=0.0, description="How far back the slow share is computed.", json_schema_extra=_OVERLOAD
    )
    ttfa_min_requests: int = Field(
        default=20, ge=1, description="Fewer requests in the window never break the SLO.", json_schema_extra=_OVERLOAD
    )
    degrade_mode: Literal["off", "shed", "fallback"] = Field(
        default="off",
        description="When the TTFA SLO breaks: report only, refuse (503) or answer fallback_clip.",
        json_schema_extra=_OVERLOAD,
    )
    fallback_clip: Path | None = Field(
        default=None, description="Audio file answered in degrade_mode=fallback.", json_schema_extra=_OVERLOAD
    )

    # live quality monitor (docs/operations/monitoring.md, "Quality monitor"): off unless a baseline is given
    quality_baseline: Path | None = Field(
        default=None, description="`turbotts quality check` baseline to re-measure.", json_schema_extra=_QUALITY
    )
    quality_interval_s: float = Field(
        default=300.0, gt=0.0, description="Pause between quality rounds.", json_schema_extra=_QUALITY
    )
    quality_threshold_db: float = Field(
        default=0.2, ge=0.0, description="Mean MCD above which the monitor warns.", json_schema_extra=_QUALITY
    )

    # scale-out (docs/scale-out.md); the default backend is one process
    backend: Literal["process", "ray"] = Field(
        default="process", description="ray: replicas behind Ray Serve.", json_schema_extra=_SCALEOUT
    )
    replicas: int = Field(
        default=1, ge=1, description="Fixed replica count (ignored with max_replicas).", json_schema_extra=_SCALEOUT
    )
    min_replicas: int = Field(
        default=1, ge=0, description="Autoscaling floor (with max_replicas).", json_schema_extra=_SCALEOUT
    )
    max_replicas: int | None = Field(
        default=None, ge=1, description="Set: autoscale between min and max.", json_schema_extra=_SCALEOUT
    )
    target_ongoing_requests: float = Field(
        default=8.0, gt=0.0, description="Autoscaling target per replica.", json_schema_extra=_SCALEOUT
    )
    max_ongoing_requests: int | None = Field(
        default=None,
        ge=1,
        description="Requests a replica takes at once; None: max_batch_size (the engine's).",
        json_schema_extra=_SCALEOUT,
    )
    ray_address: str | None = Field(
        default=None, description="auto or ray://host:10001; unset: a local cluster.", json_schema_extra=_SCALEOUT
    )
    replica_num_cpus: float = Field(
        default=1.0, gt=0.0, description="CPUs Ray reserves per replica.", json_schema_extra=_SCALEOUT
    )
    replica_num_gpus: float = Field(
        default=0.0, ge=0.0, description="GPUs Ray reserves per replica.", json_schema_extra=_SCALEOUT
    )
    replica_threads: int | None = Field(
        default=None, ge=1, description="torch threads per replica; None: torch's.", json_schema_extra=_SCALEOUT
    )
    affinity_imbalance: int = Field(
        default=4,
        ge=0,
        description="Queue-length lead beyond which cache affinity yields to the least loaded.",
        json_schema_extra=_SCALEOUT,
    )
    cache_aware_routing: bool = Field(
        default=True, description="False: Ray's default power-of-two router.", json_schema_extra=_SCALEOUT
    )
