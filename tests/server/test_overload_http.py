"""Admission control over real HTTP: a flood of the tiny model, and the fallback clip when the SLO breaks."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

from tests.server.audio import decode
from tests.server.conftest import running_server
from tests.server.guards_util import SPEECH, metric


async def _flood(url: str, num_burst: int, max_extra: int) -> list[httpx.Response]:
    """``num_burst`` requests at once, then one every 100 ms until three are refused (or ``max_extra``)."""
    limits = httpx.Limits(max_connections=num_burst + max_extra + 1)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:

        def post(n: int) -> asyncio.Task[httpx.Response]:
            body = {"input": f"Flood request number {n}.", "response_format": "wav"}
            return asyncio.create_task(client.post(SPEECH, json=body))

        burst = [post(n) for n in range(num_burst)]
        extra: list[asyncio.Task[httpx.Response]] = []
        while len(extra) < max_extra and sum(t.done() and t.result().status_code == 503 for t in extra) < 3:
            await asyncio.sleep(0.1)
            extra.append(post(num_burst + len(extra)))
        return list(await asyncio.gather(*burst, *extra))


def test_flood_gets_audio_or_503_and_recovers(tmp_path: Path) -> None:
    overrides = {
        "kv_budget_bytes": 4 * 2**20,  # two KV slots on the tiny model: the rest of the flood waits in the queue
        "admission_max_waiting": 4,
        "admission_window_s": 0.0,  # refuse from the first load sample over the threshold: no race with a window
        "admission_retry_after_s": 1.0,
        "max_new_tokens": 40,
    }
    with running_server(tmp_path, **overrides) as (url, _):
        # Admission only sees load samples, and a sample can only show more than 4 waiting once
        # 2 (running) + 5 (waiting) requests were admitted: at least 7 get audio, however fast the
        # machine. Then the queue of the rest of the burst (40 frames each on two slots) outlasts
        # the 100 ms sampling period, so the requests arriving meanwhile are refused.
        responses = asyncio.run(_flood(url, num_burst=64, max_extra=80))
        ok = [r for r in responses if r.status_code == 200]
        refused = [r for r in responses if r.status_code == 503]
        print(f"\nflood: {len(ok)} x 200, {len(refused)} x 503 of {len(responses)}")
        assert len(ok) + len(refused) == len(responses)  # nothing else: no 500, no dropped connection
        for response in ok:
            rate, samples = decode(response.content, "wav")
            assert rate == 24000 and samples.size > 0 and np.isfinite(samples).all()
        for response in refused:
            assert int(response.headers["retry-after"]) >= 1
            assert response.json()["error"]["code"] == "overloaded"
        assert len(ok) >= 2 + 4 + 1 and len(refused) >= 3
        assert metric(url, "turbotts_admission_rejections_total", 'reason="queue"') == len(refused)
        time.sleep(0.5)  # the queue has drained; admission recovers by itself
        later = httpx.post(f"{url}{SPEECH}", json={"input": "After the flood.", "response_format": "pcm"}, timeout=60)
        assert later.status_code == 200 and later.content
        assert httpx.get(f"{url}/readyz").status_code == 200


def test_fallback_clip_when_the_ttfa_slo_breaks(tmp_path: Path) -> None:
    clip = (0.3 * np.sin(2 * np.pi * 440 * np.arange(12000) / 48000)).astype(np.float32)  # 0.25 s at 48 kHz
    clip_path = tmp_path / "busy.wav"
    sf.write(clip_path, clip, 48000)
    overrides = {
        "degrade_mode": "fallback",
        "fallback_clip": clip_path,
        "ttfa_slo_s": 0.000001,  # every real request misses it
        "ttfa_min_requests": 3,
        "ttfa_max_slow_ratio": 0.05,
    }
    with running_server(tmp_path, **overrides) as (url, _), httpx.Client(base_url=url, timeout=60) as http:
        for n in range(3):
            first = http.post(SPEECH, json={"input": f"Slow request {n}.", "response_format": "pcm"})
            assert first.status_code == 200 and "x-turbotts-degraded" not in first.headers
        degraded = http.post(SPEECH, json={"input": "Anything at all.", "response_format": "flac"})
        assert degraded.status_code == 200 and degraded.headers["x-turbotts-degraded"] == "fallback"
        rate, samples = decode(degraded.content, "flac")
        assert rate == 24000 and abs(samples.size - 6000) < 100  # the clip, resampled to 24 kHz, as FLAC
        assert np.sqrt(np.mean(samples**2)) > 0.15
        assert metric(url, "turbotts_degraded_responses_total", 'mode="fallback"') == 1
