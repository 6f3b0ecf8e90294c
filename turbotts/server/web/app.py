"""The FastAPI app: :func:`create_app` wires routes; :func:`lifespan` builds the engine.

Nothing heavy happens at import or in ``create_app``: the model is loaded, the
engine thread started and the voice store opened when the server starts, and
torn down when it stops (stop accepting -> finish in-flight work within
``shutdown_grace_s`` -> abort the rest).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from turbotts.cpu.extensions import load_kernels
from turbotts.engine.async_engine import AsyncEngine
from turbotts.engine.core import EngineCore
from turbotts.errors import TurboTTSError
from turbotts.guard.apikeys import APIKeyStore
from turbotts.model.reference import encode_reference
from turbotts.quality.baseline import Baseline, load_baseline
from turbotts.server.ops.connections import open_connections
from turbotts.server.ops.context import install_log_filter, route_segments
from turbotts.server.ops.guard_wiring import Guards, build_guards, watch_pressure
from turbotts.server.ops.metrics import Metrics
from turbotts.server.ops.quality_monitor import QualityMonitor
from turbotts.server.schemas import MAX_SEED
from turbotts.server.settings import ServerSettings
from turbotts.server.speech.job import ClipSource
from turbotts.server.speech.service import KNOWN_MODELS, SpeechService
from turbotts.server.voices.redis_store import RedisVoiceStore
from turbotts.server.voices.service import VoiceModel, VoiceService
from turbotts.server.voices.store import VoiceStore
from turbotts.server.web.body_limit import BodyLimitMiddleware
from turbotts.server.web.errors import install_error_handlers
from turbotts.server.web.middleware import RequestContextMiddleware
from turbotts.server.web.routes import admin, health, playground, speech, voices, ws
from turbotts.sources import load_model_gated

logger = logging.getLogger(__name__)


def _api_keys(settings: ServerSettings) -> APIKeyStore:
    """Keys from ``api_key_file`` and ``api_keys`` (TURBOTTS_API_KEYS), kept only as SHA-256 hashes."""
    path = settings.api_key_file.expanduser() if settings.api_key_file is not None else None
    return APIKeyStore.load(path, env_var="api_keys", environ={"api_keys": settings.api_keys})


def _reload_on_sighup(guards: Guards) -> bool:
    """SIGHUP reloads the blocklist; only possible in the main thread (not in tests' in-thread servers)."""
    if guards.content_filter is None:
        return False

    def reload() -> None:
        try:
            guards.reload_blocklist()
        except TurboTTSError as exc:
            logger.error("blocklist reload failed, keeping the old list: %s", exc)

    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)
    except (ValueError, RuntimeError, NotImplementedError, AttributeError):
        return False
    return True


def _voice_model(engine: AsyncEngine) -> VoiceModel:
    model = engine.core.model
    dvae = model.modules.dvae
    return VoiceModel(
        hidden_size=model.config.gpt.hidden_size,
        sample_rate_hz=model.sample_rate_hz,
        random_voice=engine.core.runner.random_voice,
        encode_clip=lambda samples: encode_reference(dvae, samples),
    )


def _quality_baseline(settings: ServerSettings) -> Baseline | None:
    """The live quality monitor's baseline, if ``quality_baseline`` is set (InvalidInputError if it is bad)."""
    if settings.quality_baseline is None:
        return None
    return load_baseline(settings.quality_baseline.expanduser())


def _start_quality_monitor(
    app: FastAPI, engine: AsyncEngine, baseline: Baseline | None, fingerprint: str
) -> asyncio.Task[None] | None:
    """The monitor's task (None without a baseline); it yields to user work (see quality_monitor)."""
    if baseline is None:
        return None
    settings: ServerSettings = app.state.settings
    if baseline.metadata.get("fingerprint") != fingerprint:
        logger.warning("the quality baseline was made from other weights (%s)", baseline.metadata.get("fingerprint"))
    monitor = QualityMonitor(
        engine, baseline, settings.quality_interval_s, settings.quality_threshold_db, app.state.metrics,
        num_http_in_flight=lambda: getattr(app.state, "num_in_flight", 0),
    )  # fmt: skip
    return asyncio.create_task(monitor.run())


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _voice_store(settings: ServerSettings) -> VoiceStore | RedisVoiceStore:
    """Redis when replicas share the voices (``voice_store``), else this process's SQLite file."""
    if settings.uses_redis_voices() and settings.redis_url is not None:
        return RedisVoiceStore(settings.redis_url.get_secret_value())
    return VoiceStore(settings.voices_db)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: ServerSettings = app.state.settings
    install_log_filter(app.state.path_segments)
    logger.info("settings: %s", settings.summary())
    try:
        baseline = _quality_baseline(settings)  # a bad file fails start-up before the weights load
        source = settings.model_source()
        model, gated = await asyncio.to_thread(
            load_model_gated, source, device=settings.device, dtype=settings.dtype, quant=settings.quant,
            vocoder_dtype=settings.vocoder_dtype, thresholds=settings.gate_thresholds(),
        )  # fmt: skip
        kernels = load_kernels() if model.device.type == "cpu" else None
    except Exception as exc:
        app.state.startup_error = exc  # `turbotts serve` prints it and exits 2
        raise
    try:
        api_keys = _api_keys(settings)
        connections = open_connections(settings)
        guards = build_guards(settings, connections, model.fingerprint, model.sample_rate_hz, app.state.metrics)
        fallback = None
        if settings.fallback_clip is not None:
            fallback = ClipSource.from_file(settings.fallback_clip, model.sample_rate_hz)
    except TurboTTSError as exc:
        app.state.startup_error = exc
        raise
    engine_config = dataclasses.replace(settings.engine_config(), vocoder_dtype=gated.precision.vocoder_dtype)
    engine = AsyncEngine(EngineCore(model, engine_config))
    app.state.metrics.observe_start(
        kernels.report() if kernels else {"variant": "none", "isa": model.device.type, "source": "none"}, gated.report()
    )
    voices = VoiceService(_voice_store(settings), _voice_model(engine), settings.reference_limits())
    app.state.engine = engine
    app.state.api_keys = api_keys
    app.state.guards = guards
    app.state.voice_service = voices
    app.state.service = SpeechService(engine, voices, settings, app.state.metrics, guards, fallback)
    app.state.is_draining = False
    watcher = asyncio.create_task(watch_pressure(guards.admission, engine, settings.device))
    monitor = _start_quality_monitor(app, engine, baseline, model.fingerprint)
    has_sighup = _reload_on_sighup(guards)
    logger.info(
        "ready: %s model in %s/%s (vocoder %s), CPU kernels %s, %d KV slots, auth %s, redis %s, watermark %s, "
        "blocklist %s, quality monitor %s",
        "dummy" if model.is_dummy else "real", gated.precision.dtype, gated.precision.quant,
        gated.precision.vocoder_dtype, f"{kernels.variant} ({kernels.source})" if kernels else "none",
        engine.stats.num_free_slots, "on" if api_keys.is_enabled else "off",
        "on" if connections.redis is not None else "off", "on" if guards.watermark_key else "off",
        ("on (SIGHUP reloads)" if has_sighup else "on") if guards.content_filter else "off",
        f"every {settings.quality_interval_s:g} s" if monitor else "off",
    )  # fmt: skip
    try:
        yield
    finally:
        app.state.is_draining = True
        logger.info("shutting down: finishing in-flight work for up to %.1f s", settings.shutdown_grace_s)
        await _cancel(monitor)  # first: the drain waits for user work, not for a quality round
        await engine.shutdown(settings.shutdown_grace_s)
        await _cancel(watcher)
        if has_sighup:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        await connections.close()
        voices.store.close()


def _openapi_with_settings(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` stating what this server's settings refuse: ``input`` longer than ``max_input_chars``
    (a 413), and a ``model`` outside the served names (a 404), so the published schema is the validation."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()  # FastAPI caches it in app.openapi_schema: stated once, in place
            settings: ServerSettings = app.state.settings
            for name in ("SpeechRequest", "CaptionedSpeechRequest"):
                properties = schema["components"]["schemas"][name]["properties"]
                properties["input"]["maxLength"] = settings.max_input_chars
                properties["model"]["enum"] = sorted(KNOWN_MODELS)
                properties["seed"]["anyOf"][0]["maximum"] = MAX_SEED  # exact: as a float it rounds up to 2**63
        return app.openapi_schema or build()

    return openapi


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """The app for ``settings`` (default: from the environment). Cheap: no model is loaded here."""
    app = FastAPI(
        title="TurboTTS",
        version="0.1.0",
        summary="An OpenAI-compatible speech API for ChatTTS.",
        lifespan=lifespan,
    )
    app.state.settings = settings or ServerSettings()
    app.state.metrics = Metrics()
    app.state.startup_error = None
    install_error_handlers(app)
    app.add_middleware(
        BodyLimitMiddleware,
        max_input_chars=app.state.settings.max_input_chars,
        max_reference_bytes=app.state.settings.max_reference_bytes,
    )
    app.add_middleware(RequestContextMiddleware)  # outermost: the 413 and any 500 carry X-Request-ID
    routers = [module.router for module in (speech, voices, ws, health, admin, playground)] + [voices.audio_router]
    for router in routers:
        app.include_router(router)
    static_paths = playground.mount_static(app)
    app.state.mount_prefixes = (playground.STATIC_PREFIX,)  # their files' metric label
    paths = [getattr(route, "path", "") for routes in [app.routes, *(r.routes for r in routers)] for route in routes]
    paths += static_paths
    app.state.path_segments = route_segments(paths)  # access lines keep these words of a path, hash the rest
    app.openapi = _openapi_with_settings(app)  # type: ignore[method-assign]
    return app
