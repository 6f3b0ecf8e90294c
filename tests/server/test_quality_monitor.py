"""The live quality monitor against a real tiny-model server on loopback.

A baseline written by ``turbotts quality check`` from the fp32 model: a server
running the same model reproduces it (MCD ~0), one running int8 weights drifts
far past the threshold, shows it on /metrics and logs a warning, and the
``TurboTTSQualityDrift`` rule fires on the scraped values (promtool). The
monitor gives way to user work, counted as skipped rounds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from tests.deploy.promtool import alert_fires
from tests.server.conftest import running_server
from turbotts.cli import app
from turbotts.config import EngineConfig
from turbotts.engine.async_engine import AsyncEngine
from turbotts.engine.core import EngineCore
from turbotts.quality.baseline import SENTENCES, load_baseline
from turbotts.server.ops.metrics import Metrics
from turbotts.server.ops.quality_monitor import QualityMonitor
from turbotts.sources import ModelSource, load_model

THRESHOLD_DB = 0.2
MONITOR = "turbotts.server.ops.quality_monitor"
OUTCOMES = ("skipped", "measured", "failed")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("quality") / "fp32.npz"
    result = CliRunner().invoke(
        app,
        ["quality", "check", "--write-baseline", "--baseline", str(path), "--load-format", "dummy",
         "--dummy-size", "tiny", "--dtype", "fp32", "--max-new-tokens", "16"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return path


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _measured_mcds(url: str) -> tuple[list[float], dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """Per-sentence MCD of the first measured round (waits for it, like a scraper would)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        samples = _samples(url)
        if samples.get(("turbotts_quality_rounds_total", (("outcome", "measured"),)), 0) >= 1:
            mcds = [samples[("turbotts_quality_mcd_db", (("sentence", str(i)),))] for i in range(len(SENTENCES))]
            return mcds, samples
        time.sleep(0.2)
    raise AssertionError("the quality monitor measured no round within two minutes")


def _serve_and_measure(tmp_path: Path, baseline: Path, quant: str) -> list[float]:
    with running_server(
        tmp_path, quality_baseline=baseline, quality_interval_s=0.5, quality_threshold_db=THRESHOLD_DB, quant=quant
    ) as (url, _):
        mcds, samples = _measured_mcds(url)
    assert samples[("turbotts_quality_threshold_db", ())] == THRESHOLD_DB
    assert samples[("turbotts_quality_last_measured_timestamp_seconds", ())] > 0
    return mcds


def _drift_alert_fires(mcds: list[float]) -> bool:
    """The scraped gauges, held for 10 min, fed to the TurboTTSQualityDrift rule."""
    series = {f'turbotts_quality_mcd_db{{instance="a", sentence="{i}"}}': f"{v!r}x20" for i, v in enumerate(mcds)}
    series['turbotts_quality_threshold_db{instance="a"}'] = f"{THRESHOLD_DB!r}x20"
    return alert_fires("TurboTTSQualityDrift", series)


def _drift_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == MONITOR and r.levelno == logging.WARNING]


def test_same_model_reproduces_its_baseline(tmp_path: Path, baseline: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=MONITOR)
    mcds = _serve_and_measure(tmp_path, baseline, quant="none")
    assert max(mcds) < 0.01, mcds  # batch and streaming differences only: ~1e-5 dB
    assert _drift_warnings(caplog) == []
    assert any("quality round: mean MCD" in r.getMessage() for r in caplog.records)
    assert _drift_alert_fires(mcds) is False


def test_int8_weights_drift_past_the_threshold(
    tmp_path: Path, baseline: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=MONITOR)
    mcds = _serve_and_measure(tmp_path, baseline, quant="int8")
    assert sum(mcds) / len(mcds) > THRESHOLD_DB * 10, mcds
    warnings = _drift_warnings(caplog)
    assert warnings and "quality drift: mean MCD" in warnings[0] and "over the 0.200 dB threshold" in warnings[0]
    assert not any(sentence in warnings[0] for sentence in SENTENCES)  # the log names sentences by index
    assert _drift_alert_fires(mcds) is True


def test_serve_with_a_bad_baseline_exits_2_naming_it(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not a baseline")
    env = {**os.environ, "TURBOTTS_VOICES_DB": str(tmp_path / "v.sqlite3")}
    cases = ((tmp_path / "junk.npz", "is not a quality baseline"), (tmp_path / "none.npz", "does not exist"))
    for path, message in cases:
        result = subprocess.run(
            [sys.executable, "-m", "turbotts", "serve", "--load-format", "dummy", "--port", "0",
             "--quality-baseline", str(path)],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and str(path) in result.stderr
        assert "Traceback" not in result.stderr


class _Front:
    """The HTTP in-flight count the monitor reads; a test sets it as user requests would."""

    def __init__(self) -> None:
        self.num_in_flight = 0

    def __call__(self) -> int:
        return self.num_in_flight


def test_rounds_give_way_to_user_work(baseline: Path) -> None:
    """Busy at the start: skipped. Work arriving mid-round: the sentence is aborted, skipped. Idle: measured.
    An engine that refuses work: failed, and the monitor keeps running."""
    model = load_model(ModelSource(load_format="dummy", dummy_size="tiny"), dtype="fp32")
    metrics, front = Metrics(), _Front()

    async def scenario() -> tuple[list[float] | None, ...]:
        engine = AsyncEngine(EngineCore(model, EngineConfig(kv_budget_bytes=64 * 2**20)))
        monitor = QualityMonitor(engine, load_baseline(baseline), 60.0, THRESHOLD_DB, metrics, front)
        try:
            front.num_in_flight = 1
            busy = await monitor.run_round()
            front.num_in_flight = 0
            round_task = asyncio.create_task(monitor.run_round())
            while engine.stats.num_unfinished == 0 and not round_task.done():
                await asyncio.sleep(0.001)  # the monitor's first sentence is in the engine
            front.num_in_flight = 1  # a user request arrives
            interrupted = await round_task
            front.num_in_flight = 0
            while engine.stats.num_unfinished:
                await asyncio.sleep(0.01)  # the aborted sequence left the engine
            idle = await monitor.run_round()
        finally:
            await engine.shutdown(5.0)
        loop_task = asyncio.create_task(monitor.run())  # an engine that takes no work: the round fails, the loop lives
        while metrics.registry.get_sample_value("turbotts_quality_rounds_total", {"outcome": "failed"}) is None:
            await asyncio.sleep(0.01)
        assert not loop_task.done()
        loop_task.cancel()
        return busy, interrupted, idle

    busy, interrupted, idle = asyncio.run(scenario())
    assert busy is None and interrupted is None
    assert idle is not None and max(idle) < 0.01
    rounds = {o: metrics.registry.get_sample_value("turbotts_quality_rounds_total", {"outcome": o}) for o in OUTCOMES}
    assert rounds == {"skipped": 2.0, "measured": 1.0, "failed": 1.0}
