"""The series the server declares (what the dashboards and rules are checked against), and one real
tiny-model server with the quality monitor on, scraped after some traffic, to show the declarations are
what a server exports."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tests.deploy.exported import PENDING_METRICS, Exported, with_recording_rules
from tests.server.conftest import running_server
from turbotts.cli import app


def _write_baseline(path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["quality", "check", "--write-baseline", "--baseline", str(path), "--load-format", "dummy",
         "--dummy-size", "tiny", "--max-new-tokens", "4"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="session")
def series() -> Exported:
    """Every series the server declares or the rule file records, with its labels (a pending metric's: unknown)."""
    return with_recording_rules(Exported.declared()).with_series(dict.fromkeys(PENDING_METRICS))


@pytest.fixture(scope="session")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """/metrics of a server that has served a stream, refused bad input and measured a quality round."""
    tmp = tmp_path_factory.mktemp("deploy")
    _write_baseline(tmp / "baseline.npz")
    with running_server(tmp, quality_baseline=tmp / "baseline.npz", quality_interval_s=0.2) as (url, _):
        body = {"input": "Metrics for the dashboard.", "response_format": "pcm", "max_new_tokens": 8}
        assert httpx.post(f"{url}/v1/audio/speech", json=body, timeout=300).status_code == 200
        assert httpx.post(f"{url}/v1/audio/speech", json={"input": ""}, timeout=30).status_code == 400
        deadline = time.monotonic() + 120
        while 'turbotts_quality_rounds_total{outcome="measured"}' not in (text := httpx.get(f"{url}/metrics").text):
            assert time.monotonic() < deadline, "no quality round was measured"
            time.sleep(0.2)
    return Exported.parse(text)
