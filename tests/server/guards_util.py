"""Helpers shared by the production-guard tests: metric reading and concurrent requests."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx

SPEECH = "/v1/audio/speech"


def metric(base_url: str, name: str, labels: str = "") -> float:
    """The value of one sample on /metrics (0 when absent); ``labels`` like ``level="l1",result="hit"``."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    pattern = rf"^{re.escape(name)}{{{re.escape(labels)}}} (\S+)$" if labels else rf"^{re.escape(name)} (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def _post_all(base_url: str, bodies: list[dict[str, Any]], delays_s: list[float]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies) + 1)
    async with httpx.AsyncClient(base_url=base_url, timeout=300, limits=limits) as client:

        async def one(index: int, body: dict[str, Any]) -> httpx.Response:
            await asyncio.sleep(delays_s[index])
            return await client.post(SPEECH, json=body)

        return list(await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies))))


def post_concurrently(
    base_url: str, bodies: list[dict[str, Any]], delays_s: list[float] | None = None
) -> list[httpx.Response]:
    """POST every body at once (or each after its delay), all in flight together."""
    return asyncio.run(_post_all(base_url, bodies, delays_s or [0.0] * len(bodies)))
