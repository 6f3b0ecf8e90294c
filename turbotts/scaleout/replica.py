"""The replica deployment: one model, today's FastAPI app unchanged, driven through :mod:`.bridge`.

Each replica runs the app's own lifespan (model, engine thread, caches, guards)
when Ray starts it, and its shutdown (drain in-flight work for
``shutdown_grace_s``) when Ray stops it. Every response carries ``X-Replica``
so clients and tests can see which replica answered.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from ray import serve
from starlette.types import Message
from uvicorn.config import Config
from uvicorn.lifespan.on import LifespanOn

from turbotts.scaleout.bridge import ForwardedRequest, stream_app
from turbotts.scaleout.fleet_metrics import MetricsReporter
from turbotts.server.settings import ServerSettings
from turbotts.server.web.app import create_app

REPLICA_HEADER = b"x-replica"
logger = logging.getLogger(__name__)


class TTSReplica:
    """One model and one engine behind Ray Serve (``forward`` streams an ASGI exchange)."""

    async def __init__(self, settings: ServerSettings) -> None:  # type: ignore[misc]  # Ray awaits it
        if settings.replica_threads is not None:
            import torch

            torch.set_num_threads(settings.replica_threads)
        self.name = serve.get_replica_context().replica_id.unique_id
        self.app = create_app(settings)
        self._lifespan = LifespanOn(Config(self.app, lifespan="on", log_config=None))
        await self._lifespan.startup()
        if self._lifespan.should_exit:
            error = self.app.state.startup_error
            raise RuntimeError(f"replica start-up failed: {error}")
        self._metrics = MetricsReporter(self.name, self.app)
        self._metrics.start()
        logger.info("replica %s ready", self.name)

    async def forward(self, request: ForwardedRequest, routing_key: str | None = None) -> AsyncIterator[Message]:
        """The app's ASGI messages for ``request`` (``routing_key`` is read by the router, not here)."""
        next_message = None
        if request.type == "websocket":
            relay: Any = request.relay
            session = request.session_id

            async def next_message() -> Message:
                message: Message = await relay.get.remote(session)
                return message

        header = (REPLICA_HEADER, self.name.encode())
        async for message in stream_app(self.app, request, next_message, header):
            yield message

    def check_health(self) -> None:
        """Ray restarts a replica whose engine thread stopped."""
        engine = getattr(self.app.state, "engine", None)
        if engine is None or not engine.is_alive:
            raise RuntimeError(f"replica {self.name}: the engine thread is not running")

    async def __del__(self) -> None:
        """Ray calls this after in-flight requests finished (or ``graceful_shutdown_timeout_s`` passed)."""
        if hasattr(self, "_metrics"):
            self._metrics.stop()
        if hasattr(self, "_lifespan"):
            self.app.state.is_draining = True
            await self._lifespan.shutdown()
