"""The FastAPI app: :func:`create_app` wires routes; :func:`lifespan` builds the engine.

Nothing heavy happens at import or in ``create_app``: the model is loaded, the
engine thread started and the voice store opened when the server starts, and
torn down when it stops (stop accepting -> finish in-flight work within
``shutdown_grace_s`` -> abort the rest).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from turbotts.engine.async_engine import AsyncEngine
from turbotts.engine.core import EngineCore
from turbotts.guard.apikeys import APIKeyStore, parse_key_file, parse_key_list
from turbotts.model.loader import load_model
from turbotts.server.context import install_log_filter
from turbotts.server.errors import install_error_handlers
from turbotts.server.metrics import Metrics
from turbotts.server.middleware import RequestContextMiddleware
from turbotts.server.routes import health, speech, voices, ws
from turbotts.server.service import SpeechService
from turbotts.server.settings import ServerSettings
from turbotts.server.voices import VoiceStore

logger = logging.getLogger(__name__)


def _api_keys(settings: ServerSettings) -> APIKeyStore:
    keys = parse_key_list(settings.api_keys)
    if settings.api_key_file is not None:
        keys += parse_key_file(Path(settings.api_key_file).expanduser().read_text(encoding="utf-8"))
    return APIKeyStore(keys)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: ServerSettings = app.state.settings
    install_log_filter()
    logger.info("settings: %s", settings.summary())
    try:
        source = settings.model_source()
        model = await asyncio.to_thread(load_model, source, device=settings.device, dtype=settings.dtype)
    except Exception as exc:
        app.state.startup_error = exc  # `turbotts serve` prints it and exits 2
        raise
    engine = AsyncEngine(EngineCore(model, settings.engine_config()))
    store = VoiceStore(settings.voices_db)
    app.state.engine = engine
    app.state.api_keys = _api_keys(settings)
    app.state.service = SpeechService(engine, store, settings, app.state.metrics)
    app.state.is_draining = False
    logger.info("ready: %s model, %d KV slots", "dummy" if model.is_dummy else "real", engine.stats.num_free_slots)
    try:
        yield
    finally:
        app.state.is_draining = True
        logger.info("shutting down: finishing in-flight work for up to %.1f s", settings.shutdown_grace_s)
        await engine.shutdown(settings.shutdown_grace_s)
        store.close()


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
    app.add_middleware(RequestContextMiddleware)
    for module in (speech, voices, ws, health):
        app.include_router(module.router)
    return app
