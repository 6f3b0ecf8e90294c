"""Every replica's Prometheus metrics at the endpoint's ``/metrics``, each sample labelled ``replica``.

Why: through Ray's proxy, a scrape of ``/metrics`` would reach one replica at
random. Instead each replica posts its own exposition to a small board actor
every ``REPORT_PERIOD_S``; the ingress answers ``/metrics`` with all of them,
each sample labelled with the replica that made it, so PromQL sums the fleet:
``sum(rate(turbotts_audio_seconds_total[1m]))``, or the TTFA histogram with
``sum by (le) (...)``. A replica that stops posting (it died) drops out after
``STALE_AFTER_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from typing import Any

import ray

BOARD_NAME = "turbotts-metrics-board"
BOARD_NAMESPACE = "turbotts"
REPORT_PERIOD_S = 1.0
STALE_AFTER_S = 10.0
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{)?(.*)$")
logger = logging.getLogger(__name__)


@ray.remote(num_cpus=0)
class MetricsBoard:
    """The latest exposition of each replica (an asyncio actor: posts and reads never block each other)."""

    def __init__(self) -> None:
        self._latest: dict[str, tuple[float, str]] = {}

    async def post(self, replica: str, text: str) -> None:
        self._latest[replica] = (time.monotonic(), text)

    async def read(self) -> dict[str, str]:
        now = time.monotonic()
        self._latest = {k: v for k, v in self._latest.items() if now - v[0] < STALE_AFTER_S}
        return {replica: text for replica, (_, text) in sorted(self._latest.items())}


def board() -> Any:
    """The board actor of this cluster, made by the first caller."""
    return MetricsBoard.options(  # type: ignore[attr-defined]
        name=BOARD_NAME, namespace=BOARD_NAMESPACE, get_if_exists=True, lifetime="detached"
    ).remote()


class MetricsReporter:
    """Posts one replica's metrics to the board while it runs."""

    def __init__(self, replica: str, app: Any) -> None:
        self._replica = replica
        self._app = app
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _loop(self) -> None:
        target = board()
        while True:
            state = self._app.state
            engine = getattr(state, "engine", None)
            text = state.metrics.render(engine.stats if engine is not None else None).decode()
            try:
                await target.post.remote(self._replica, text)
            except ray.exceptions.RayError as exc:  # the board restarts with the ingress; find it again
                logger.debug("metrics post failed: %s", exc)
                with contextlib.suppress(ray.exceptions.RayError, ValueError):
                    target = board()
            await asyncio.sleep(REPORT_PERIOD_S)


def _label(line: str, replica: str) -> str:
    match = _SAMPLE.match(line)
    if match is None:
        return line
    name, brace, rest = match.groups()
    label = f'replica="{replica}"'
    return f"{name}{{{label},{rest}" if brace else f"{name}{{{label}}}{rest}"


def merge(expositions: dict[str, str]) -> str:
    """One exposition: each metric family once, with every replica's samples labelled ``replica``."""
    families: dict[str, list[str]] = {}
    for replica, text in expositions.items():
        family = ""
        for line in text.splitlines():
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                family = line.split(" ", 3)[2]
                lines = families.setdefault(family, [])
                if line not in lines:
                    lines.insert(sum(1 for x in lines if x.startswith("#")), line)
            elif line and not line.startswith("#"):
                families.setdefault(family, []).append(_label(line, replica))
    return "".join(line + "\n" for lines in families.values() for line in lines)
