"""``turbotts serve``: settings from flags, environment and file, then uvicorn with a real drain on SIGTERM."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from turbotts.cli_options import CheckpointOpt, KeyEnvOpt, PublicKeyOpt, fail
from turbotts.errors import TurboTTSError
from turbotts.optional import SERVE_MODULES, require


class _StartupTracebackFilter(logging.Filter):
    """Drops uvicorn's traceback for start-up errors of our own: serve prints their message instead."""

    def __init__(self, server_app: Any) -> None:
        super().__init__()
        self.server_app = server_app

    def filter(self, record: logging.LogRecord) -> bool:
        is_ours = isinstance(self.server_app.state.startup_error, TurboTTSError)
        return not (is_ours and str(record.msg).startswith("Traceback"))


def serve(
    checkpoint: CheckpointOpt = None,
    load_format: Annotated[
        str | None, typer.Option("--load-format", help="auto: --checkpoint or the official weights; dummy: random.")
    ] = None,
    dummy_size: Annotated[str | None, typer.Option("--dummy-size", help="Size of dummy weights: tiny or full.")] = None,
    key_env: KeyEnvOpt = None,
    public_key: PublicKeyOpt = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda or cuda:N.")] = None,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="GPT precision: auto (default), fp32, bf16 or fp16.")
    ] = None,
    quant: Annotated[
        str | None,
        typer.Option(
            "--quant",
            help="auto (default: int8 where faster and it passes the quality gate against fp32), "
            "none (bit-exact) or int8.",
        ),
    ] = None,
    vocoder_dtype: Annotated[
        str | None, typer.Option("--vocoder-dtype", help="Decoder/Vocos: auto (default), fp32 or bf16.")
    ] = None,
    kv_dtype: Annotated[
        str | None, typer.Option("--kv-dtype", help="KV cache: auto (bf16 under the int8 decode stack), fp32, bf16.")
    ] = None,
    host: Annotated[str | None, typer.Option("--host", help="Interface to listen on (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="TCP port (default 8000).")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="YAML, JSON or TOML settings file (keys as TURBOTTS_* names).")
    ] = None,
    redis_url: Annotated[
        str | None, typer.Option("--redis-url", help="Redis for the shared L2 cache and rate limits (default: none).")
    ] = None,
    rate_limit_rps: Annotated[
        float | None, typer.Option("--rate-limit-rps", help="Requests per second per client IP and API key; 0 = off.")
    ] = None,
    rate_limit_burst: Annotated[int | None, typer.Option("--rate-limit-burst", help="Token bucket size.")] = None,
    api_key_file: Annotated[
        Path | None, typer.Option("--api-key-file", help="Bearer keys, one per line (also TURBOTTS_API_KEYS).")
    ] = None,
    blocklist: Annotated[
        Path | None, typer.Option("--blocklist", help="Blocked terms, one per line; SIGHUP reloads it.")
    ] = None,
    no_watermark: Annotated[bool, typer.Option("--no-watermark", help="Do not watermark synthesized audio.")] = False,
    cache_max_bytes: Annotated[int | None, typer.Option("--cache-max-bytes", help="L1 cache budget; 0 = off.")] = None,
    degrade_mode: Annotated[
        str | None, typer.Option("--degrade-mode", help="When the TTFA SLO breaks: off, shed or fallback.")
    ] = None,
    fallback_clip: Annotated[
        Path | None, typer.Option("--fallback-clip", help="Audio file answered in --degrade-mode fallback.")
    ] = None,
    log_format: Annotated[str | None, typer.Option("--log-format", help="json (default) or text.")] = None,
    quality_baseline: Annotated[
        Path | None, typer.Option("--quality-baseline", help="Re-measure this `quality check` baseline live.")
    ] = None,
    admission: Annotated[
        str | None, typer.Option("--admission", help="realtime (default): streams start only within real time; off.")
    ] = None,
    max_queue_wait_s: Annotated[
        float | None, typer.Option("--max-queue-wait-s", help="Refuse (503) a stream waiting longer; 0 = never.")
    ] = None,
    realtime_capacity_override: Annotated[
        int | None, typer.Option("--realtime-capacity", help="Fixed real-time capacity in streams (default: learned).")
    ] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="process (default): one server; ray: replicas on Ray Serve.")
    ] = None,
    replicas: Annotated[int | None, typer.Option("--replicas", help="ray: replicas, one model each.")] = None,
    min_replicas: Annotated[int | None, typer.Option("--min-replicas", help="ray: autoscaling floor.")] = None,
    max_replicas: Annotated[
        int | None, typer.Option("--max-replicas", help="ray: autoscale up to this many replicas.")
    ] = None,
    target_ongoing_requests: Annotated[
        float | None, typer.Option("--target-ongoing-requests", help="ray: autoscaling target per replica.")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="ray: auto or ray://head:10001 (unset: a local cluster).")
    ] = None,
) -> None:
    """Serve the OpenAI-compatible speech API (flags > TURBOTTS_* environment > --config file > defaults)."""
    require(*SERVE_MODULES, purpose="turbotts serve")
    import uvicorn
    from pydantic import ValidationError

    from turbotts.server.ops.context import configure_logging
    from turbotts.server.settings import ServerSettings
    from turbotts.server.web.app import create_app

    flags: dict[str, Any] = {
        "checkpoint": checkpoint, "load_format": load_format, "dummy_size": dummy_size, "key_env": key_env,
        "public_key": public_key, "device": device,
        "dtype": dtype, "quant": quant, "vocoder_dtype": vocoder_dtype, "kv_dtype": kv_dtype,
        "host": host, "port": port,
        "config_file": config, "redis_url": redis_url,
        "rate_limit_rps": rate_limit_rps, "rate_limit_burst": rate_limit_burst, "api_key_file": api_key_file,
        "blocklist": blocklist, "watermark": False if no_watermark else None, "cache_max_bytes": cache_max_bytes,
        "degrade_mode": degrade_mode, "fallback_clip": fallback_clip, "log_format": log_format,
        "quality_baseline": quality_baseline,
        "admission": admission, "max_queue_wait_s": max_queue_wait_s,
        "realtime_capacity_override": realtime_capacity_override,
        "backend": backend, "replicas": replicas, "min_replicas": min_replicas, "max_replicas": max_replicas,
        "target_ongoing_requests": target_ongoing_requests, "ray_address": ray_address,
    }  # fmt: skip
    try:
        settings = ServerSettings(**{k: v for k, v in flags.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise fail(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from exc
    configure_logging(settings.log_level, settings.log_format)
    if settings.backend == "ray":
        require("ray", purpose="turbotts serve --backend ray")
        from turbotts.scaleout.launch import run

        run(settings)
        return
    server_app = create_app(settings)
    from turbotts.server.ops.drain import DrainingServer

    server = DrainingServer(
        uvicorn.Config(
            server_app,
            host=settings.host,
            port=settings.port,
            lifespan="on",
            ws="websockets-sansio",
            log_level=settings.log_level,
            log_config=None,  # uvicorn's records go to our (redacted, request-id) root handlers
            timeout_graceful_shutdown=max(1, round(settings.shutdown_grace_s)),
        ),
        server_app,
        settings.shutdown_grace_s,
    )
    logging.getLogger("uvicorn.error").addFilter(_StartupTracebackFilter(server_app))
    with contextlib.suppress(SystemExit):  # uvicorn exits 3 when start-up fails; we report it below
        server.run()
    error = server_app.state.startup_error
    if error is not None:
        raise fail(str(error) if isinstance(error, TurboTTSError) else f"start-up failed: {error!r}")
    if not server.started:
        raise fail(f"the server did not start (is {settings.host}:{settings.port} free?)")
