"""``turbotts loadtest`` against a real TurboTTS server (tiny dummy model, HTTP on loopback).

What the load generator counts must be what the server counted: statuses, first-audio
observations, audio seconds (decoded by the client, summed by the server), errors and
cache hits, read from the server's own ``/metrics`` before and after.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.server.conftest import running_server
from tests.server.test_metrics_values import samples, value
from turbotts.cli import app

SPEECH = "/v1/audio/speech"
TOO_LONG = "This sentence is much longer than the one hundred characters this test server accepts, so it is refused."


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(tmp_path_factory.mktemp("loadtest"), max_input_chars=100) as (base_url, _):
        yield base_url


def loadtest(tmp_path: Path, *args: str) -> tuple[int, str, dict[str, Any] | None]:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(app, ["loadtest", *args, "--json", str(out)])
    return result.exit_code, result.output, json.loads(out.read_text()) if out.exists() else None


def test_the_report_counts_what_the_server_counted(tmp_path: Path, url: str) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text(f"Hello there.\n\n你好，欢迎光临。\n{TOO_LONG}\n")
    before = samples(url)
    # seeded, one client: texts 0 and 1 are synthesized once, then served from L1; text 2 is refused (413)
    code, output, report = loadtest(tmp_path, url, "--concurrency", "1", "--num-requests", "6", "--texts", str(texts),
                                    "--format", "pcm,wav", "--seeded", "--max-new-tokens", "12")  # fmt: skip
    assert code == 0, output
    assert report is not None
    after = samples(url)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert report["num_requests"] == 6
    assert report["status_counts"] == {"200": 4, "413": 2}
    assert moved("turbotts_request_duration_seconds_count", route=SPEECH, status="200") == 4
    assert moved("turbotts_errors_total", status="413") == 2
    assert report["error_counts"] == {"input_too_long": 2}
    ttfa_by_format = {f: moved("turbotts_time_to_first_audio_seconds_count", format=f) for f in ("pcm", "wav")}
    assert ttfa_by_format == {"pcm": 2, "wav": 2}
    assert report["audio_s"] == pytest.approx(moved("turbotts_audio_seconds_total"), abs=1e-6)
    assert report["cache_counts"] == {"l1": 2, "miss": 2}
    assert moved("turbotts_cache_lookups_total", level="l1", result="hit") == 2
    assert report["ttfa_s"]["p50"] is not None and report["ttfa_s"]["p50"] <= report["latency_s"]["p50"]
    assert report["throughput_rps"] > 0 and report["rtf"]["p50"] > 0
    assert len(report["runs"][0]["requests"]) == 6


def test_a_poisson_sweep_reports_each_rate_and_plots_against_offered_load(tmp_path: Path, url: str) -> None:
    plot = tmp_path / "sweep.png"
    before = samples(url)
    code, output, report = loadtest(tmp_path, url, "--sweep", "2,8", "--num-requests", "3", "--stream-format", "sse",
                                    "--max-new-tokens", "12", "--plot", str(plot))  # fmt: skip
    assert code == 0, output
    assert report is not None
    assert [run["offered_load"] for run in report["runs"]] == [{"request_rate": 2.0}, {"request_rate": 8.0}]
    assert all(run["status_counts"] == {"200": 3} for run in report["runs"])
    after = samples(url)
    assert (
        value(after, "turbotts_request_duration_seconds_count", route=SPEECH, status="200")
        - value(before, "turbotts_request_duration_seconds_count", route=SPEECH, status="200")
        == 6
    )
    for key in ("ttfa_s", "latency_s"):
        assert set(report[key]) >= {"p50", "p90", "p99"}
    for key in ("throughput_audio_s_per_s", "continuity_rate", "goodput_rps", "stall_s", "status_counts"):
        assert key in report, key
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_duration_bounds_a_run_before_its_request_count(tmp_path: Path, url: str) -> None:
    code, output, report = loadtest(tmp_path, url, "--concurrency", "1", "--num-requests", "1000",
                                    "--duration-s", "0", "--max-new-tokens", "4")  # fmt: skip
    assert code == 0, output
    assert report is not None and report["num_requests"] == 0 and report["status_counts"] == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "exactly one of --concurrency, --request-rate or --sweep"),
        (("--concurrency", "2", "--request-rate", "1"), "exactly one of"),
        (("--concurrency", "0"), "--concurrency takes positive numbers"),
        (("--sweep", "1,x"), "--sweep takes a comma-separated list"),
        (("--request-rate", "-1"), "--request-rate must be positive"),
        (("--concurrency", "1", "--format", "ogg"), "--format takes formats among"),
        (("--concurrency", "1", "--stream-format", "ws"), "--stream-format must be audio or sse"),
        (("--concurrency", "1", "--texts", "/nonexistent/texts.txt"), "cannot read --texts"),
        (("--concurrency", "1", "--prebuffer-ms", "-5"), "--prebuffer-ms must be >= 0"),
        (("--concurrency", "1", "--api-key-env", "TURBOTTS_TEST_UNSET_KEY"), "environment variable is not set"),
    ],
)
def test_bad_flags_are_one_clear_message_and_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    code, output, report = loadtest(tmp_path, "http://127.0.0.1:9", *args)
    assert code == 2, output
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], output
    assert report is None  # nothing was sent, nothing written


def test_a_url_without_a_scheme_is_refused(tmp_path: Path) -> None:
    code, output, _ = loadtest(tmp_path, "localhost:8000", "--concurrency", "1")
    assert code == 2 and "error: URL must start with http://" in output
