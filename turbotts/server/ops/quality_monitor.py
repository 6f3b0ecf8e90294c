"""The live quality monitor: ``turbotts quality check`` run inside the server, every ``quality_interval_s``.

With ``quality_baseline`` set, the server re-synthesizes the baseline's fixed
sentences through its own engine (the serving path: the same weights,
precision and kernels as user requests) with the check's deterministic
settings, and exports each sentence's mel-cepstral distortion against the
baseline as ``turbotts_quality_mcd_db{sentence="0"}``. A mean above
``quality_threshold_db`` logs a warning; the ``TurboTTSQualityDrift`` alert
fires on the same comparison (the threshold is exported too).

Off the hot path: the scheduler has no priorities (it only puts a request's own
follow-up first), so the monitor yields instead. A round starts only when the
engine and the HTTP front are idle, and is abandoned (its sequence aborted, its
KV slot freed) as soon as other work arrives; either way it counts as
``turbotts_quality_rounds_total{outcome="skipped"}``. A monitor that is always
skipped measures nothing, hence ``turbotts_quality_last_measured_timestamp_seconds``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable

import numpy as np

from turbotts.engine.async_engine import AsyncEngine
from turbotts.errors import TurboTTSError
from turbotts.quality.baseline import SENTENCES, Baseline, fixed_params
from turbotts.server.ops.metrics import Metrics

logger = logging.getLogger(__name__)
BUSY_POLL_S = 0.05  # how often a running round looks for user work to give way to


class QualityMonitor:
    """Measures the baseline's sentences on an idle engine and publishes their MCD.

    Args:
        engine: the serving engine.
        baseline: what the audio should be (:func:`turbotts.quality.baseline.load_baseline`).
        interval_s: pause between rounds (measured or skipped).
        threshold_db: mean MCD above which a round logs a warning.
        metrics: where the gauges live.
        num_http_in_flight: HTTP requests being served now (any of them makes the server busy).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        baseline: Baseline,
        interval_s: float,
        threshold_db: float,
        metrics: Metrics,
        num_http_in_flight: Callable[[], int],
    ) -> None:
        self.engine = engine
        self.baseline = baseline
        self.interval_s = interval_s
        self.threshold_db = threshold_db
        self.metrics = metrics
        self.num_http_in_flight = num_http_in_flight
        self.params = fixed_params(baseline.max_new_tokens)
        self._ids = itertools.count()
        metrics.quality_threshold_db.set(threshold_db)
        metrics.quality_last_measured_s.set(time.time())  # the clock of the staleness alert starts now

    async def run(self) -> None:
        """Measure now, then every ``interval_s``, until cancelled; a failed round never ends the monitor."""
        while True:
            try:
                await self.run_round()
            except TurboTTSError as exc:  # the engine failed or is shutting down: try again next round
                self.metrics.quality_rounds.labels("failed").inc()
                logger.warning("quality round failed: %s", exc)
            except Exception:  # a bug here must not take the monitor (or the shutdown) down: logged with traceback
                self.metrics.quality_rounds.labels("failed").inc()
                logger.exception("quality round failed unexpectedly")
            await asyncio.sleep(self.interval_s)

    async def run_round(self) -> list[float] | None:
        """One round: the MCD (dB) per sentence, or None when it gave way to other work."""
        if self._is_busy(num_own=0):
            self._skip("the server is busy")
            return None
        audio = []
        for text in SENTENCES:
            wav = None if self.num_http_in_flight() > 0 else await self._synthesize(text)
            if wav is None:
                self._skip("work arrived during the round")
                return None
            audio.append(wav)
        mcds = await asyncio.to_thread(self.baseline.mcd_db, audio, self.engine.sample_rate_hz)  # STFTs: off the loop
        self._publish(mcds)
        return mcds

    def _is_busy(self, num_own: int) -> bool:
        return self.engine.stats.num_unfinished > num_own or self.num_http_in_flight() > 0

    def _skip(self, why: str) -> None:
        self.metrics.quality_rounds.labels("skipped").inc()
        logger.debug("quality round skipped: %s", why)

    async def _synthesize(self, text: str) -> np.ndarray | None:
        """The sentence's waveform, or None if user work arrived first (the sequence is aborted)."""
        task = asyncio.create_task(self._collect(text))
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=BUSY_POLL_S)
                if not task.done() and self._is_busy(num_own=1):
                    return None
            return task.result()
        finally:
            if not task.done():  # given way, or the monitor itself was cancelled
                task.cancel()  # closes the engine stream: the request is aborted and its KV slot freed

    async def _collect(self, text: str) -> np.ndarray:
        request_id = f"quality-{next(self._ids)}"
        outputs = self.engine.generate(text, self.params, request_id=request_id, stream=False)
        chunks = [out.audio async for out in outputs]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)

    def _publish(self, mcds: list[float]) -> None:
        for index, value in enumerate(mcds):
            self.metrics.quality_mcd_db.labels(str(index)).set(value)
        self.metrics.quality_rounds.labels("measured").inc()
        self.metrics.quality_last_measured_s.set(time.time())
        mean = float(np.mean(mcds))
        per_sentence = ", ".join(f"{value:.3f}" for value in mcds)
        if mean > self.threshold_db:
            logger.warning(
                "quality drift: mean MCD %.3f dB is over the %.3f dB threshold (per sentence: %s dB); "
                "compare the weights, dtype and quant with the baseline's (%s)",
                mean, self.threshold_db, per_sentence, self.baseline.metadata.get("settings"),
            )  # fmt: skip
        else:
            logger.info("quality round: mean MCD %.3f dB (per sentence: %s dB)", mean, per_sentence)
