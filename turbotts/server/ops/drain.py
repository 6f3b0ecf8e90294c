"""Graceful drain on SIGTERM: stop taking work first, finish what runs, then let uvicorn exit.

Why not uvicorn's own handling: on SIGTERM uvicorn closes the listening sockets
at once and runs the lifespan's shutdown only after the last connection closed,
so a flag set there can never answer anything. :class:`DrainingServer` instead
flips ``app.state.is_draining`` the moment the signal arrives (``/readyz`` and
every new request get 503 with ``Retry-After``, so load balancers move traffic
away), keeps serving the in-flight requests for up to ``shutdown_grace_s``, and
only then tells uvicorn to exit. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from types import FrameType
from typing import Any

import uvicorn

logger = logging.getLogger(__name__)
POLL_INTERVAL_S = 0.05


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose first SIGTERM/SIGINT drains ``app`` before exiting (exit code 0)."""

    def __init__(self, config: uvicorn.Config, app: Any, grace_s: float) -> None:
        super().__init__(config)
        self._app = app
        self._grace_s = grace_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets=sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        is_first = not getattr(self._app.state, "is_draining", False)
        if not is_first or self._loop is None or not self.started:
            super().handle_exit(sig, frame)  # second signal, or not serving yet: uvicorn's way
            return
        self._app.state.is_draining = True
        logger.info("%s: draining, new requests get 503", signal.Signals(sig).name)
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        deadline = time.monotonic() + self._grace_s
        while getattr(self._app.state, "num_in_flight", 0) > 0 and time.monotonic() < deadline:
            await asyncio.sleep(POLL_INTERVAL_S)
        num_left = getattr(self._app.state, "num_in_flight", 0)
        logger.info("drained (%d requests still running are cut off); exiting", num_left)
        self.should_exit = True
