"""``turbotts loadtest --find-capacity``: the judgement of a level, the search, and a live tiny server.

The judgement (:func:`judge_level`) is fed summaries of hand-made request records, so each
criterion is shown at its boundary. The live test makes the capacity known in advance: a server
that decodes one row at a time (``max_batch_size=1``) makes a second listener wait for the first
one's whole utterance, so with a TTFA bound of half an utterance's latency (measured here, on
this machine, now) level 1 passes and level 2 fails on TTFA.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli_runner import run_cli
from tests.server.conftest import running_server
from turbotts.bench.loadtest_capacity import (
    CapacityCriteria,
    CapacityPlan,
    find_capacity,
    judge_level,
    machine_info,
    search_capacity,
    summarize_level,
)
from turbotts.bench.loadtest_client import LoadOptions, RequestRecord, RunResult, speech_url
from turbotts.bench.loadtest_player import Playback

CRITERIA = CapacityCriteria()  # continuity >= 0.99, TTFA p95 <= 1 s, at most half refused
#: seed 1 makes this text about 4 s of audio on the tiny dummy weights (184 frames before EOS)
LONG_TEXT = "Hello there, how are you today?"
LONG_SEED = 1


def record(index: int, *, ttfa_s: float = 0.2, max_stall_s: float = 0.0, status: int = 200) -> RequestRecord:
    if status != 200:
        return RequestRecord(index, "pcm", 0.0, status, "overloaded" if status == 503 else "rate_limit_exceeded")
    playback = Playback(start_s=ttfa_s, num_stalls=int(max_stall_s > 0), total_stall_s=max_stall_s,
                        max_stall_s=max_stall_s)  # fmt: skip
    return RequestRecord(index, "pcm", 0.0, 200, None, ttfa_s, ttfa_s, 2.0, 1.5, "miss", playback)


def summary_of(records: list[RequestRecord], concurrency: int = 4) -> dict[str, Any]:
    return summarize_level(RunResult(records, wall_s=10.0), concurrency, slo_ttfa_s=1.0)


def test_two_stalls_over_100ms_in_100_streams_fail_on_continuity_and_one_does_not() -> None:
    two = summary_of([record(i, max_stall_s=0.15 if i < 2 else 0.05) for i in range(100)])
    assert two["continuity_rate"] == pytest.approx(0.98)
    verdict = judge_level(two, CRITERIA)
    assert not verdict.is_passed and verdict.failed_on == ("continuity",)
    one = summary_of([record(i, max_stall_s=0.15 if i < 1 else 0.05) for i in range(100)])
    assert judge_level(one, CRITERIA).is_passed


def test_a_ttfa_p95_over_the_bound_fails_on_ttfa() -> None:
    slow = summary_of([record(i, ttfa_s=1.5 if i < 10 else 0.2) for i in range(100)])
    assert slow["ttfa_p95_s"] == 1.5
    assert judge_level(slow, CRITERIA).failed_on == ("ttfa",)
    few_slow = summary_of([record(i, ttfa_s=1.5 if i < 4 else 0.2) for i in range(100)])  # 4 %: p95 stays low
    assert few_slow["ttfa_p95_s"] == 0.2 and judge_level(few_slow, CRITERIA).is_passed


def test_refusals_are_counted_but_are_no_stalls() -> None:
    summary = summary_of([record(i, status=(503, 429)[i % 2]) if i < 40 else record(i) for i in range(100)])
    assert summary["num_refused"] == 40 and summary["num_ok"] == 60
    assert summary["continuity_rate"] == 1.0
    assert judge_level(summary, CRITERIA).is_passed


def test_a_mostly_refused_level_fails_as_refused() -> None:
    mostly = summary_of([record(i, status=503) if i < 51 else record(i) for i in range(100)])
    assert judge_level(mostly, CRITERIA).failed_on == ("refused",)
    half = summary_of([record(i, status=503) if i < 50 else record(i) for i in range(100)])
    assert judge_level(half, CRITERIA).is_passed  # "more than half" ends the search, half does not
    everything = summary_of([record(i, status=503) for i in range(10)])
    assert everything["continuity_rate"] is None  # nobody was let in: nothing else to judge
    assert judge_level(everything, CRITERIA).failed_on == ("refused",)


def test_a_level_whose_requests_all_failed_fails_on_continuity_and_ttfa() -> None:
    broken = summary_of([RequestRecord(i, "pcm", 0.0, None, "ConnectError") for i in range(3)])
    assert judge_level(broken, CRITERIA).failed_on == ("continuity", "ttfa")


def test_the_search_stops_at_the_first_failing_level_and_reports_the_one_before() -> None:
    def run_level(level: int) -> dict[str, Any]:  # TTFA grows 0.3 s a listener: levels 1-3 pass, 4 fails
        return summary_of([record(i, ttfa_s=0.3 * level) for i in range(level * 3)], level)

    search = search_capacity(run_level, CRITERIA, max_concurrency=8)
    assert (search.capacity, search.stop_reason) == (3, "ttfa")
    assert [level["passed"] for level in search.levels] == [True, True, True, False]
    assert search.levels[-1]["failed_on"] == ["ttfa"]
    assert search_capacity(run_level, CRITERIA, max_concurrency=2).stop_reason == "max_concurrency"
    first_fails = search_capacity(lambda level: run_level(level + 3), CRITERIA, max_concurrency=8)
    assert first_fails.capacity == 0 and len(first_fails.levels) == 1


def test_the_machine_is_read_from_proc_cpuinfo() -> None:
    machine = machine_info()
    assert machine["cpu_count"] == os.cpu_count()
    assert set(machine["isa"]) == {"avx2", "avx512f", "avx512_bf16", "amx_tile"}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        lines = cpuinfo.read_text().splitlines()
        family = next(line.split(":")[1].strip() for line in lines if line.startswith("cpu family"))
        flags = next(line.split(":")[1].split() for line in lines if line.startswith("flags"))
        assert machine["cpu_family"] == family
        assert machine["isa"]["avx2"] == ("avx2" in flags)


@pytest.fixture(scope="module")
def one_row_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One sequence decoded at a time, no audio cache (every request is synthesized), long utterances allowed."""
    settings = {"max_batch_size": 1, "cache_max_bytes": 0, "max_new_tokens": 400}
    with running_server(tmp_path_factory.mktemp("capacity"), **settings) as (url, _):
        yield url


def _timed_request(url: str) -> tuple[float, float]:
    """(time to the first byte, latency) of one long request alone."""
    body = {"input": LONG_TEXT, "response_format": "pcm", "seed": LONG_SEED}
    started_s, first_s = time.perf_counter(), None
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=120) as response:
        assert response.status_code == 200
        for _ in response.iter_bytes():
            first_s = time.perf_counter() - started_s if first_s is None else first_s
    assert first_s is not None
    return first_s, time.perf_counter() - started_s


def test_one_row_at_a_time_has_capacity_one_and_the_second_listener_fails_on_ttfa(one_row_url: str) -> None:
    _timed_request(one_row_url)  # warm-up
    first_s, latency_s = _timed_request(one_row_url)
    assert first_s < latency_s / 4, f"first audio {first_s:.3f} s is too close to the latency {latency_s:.3f} s"
    criteria = CapacityCriteria(min_continuity=0.0, max_ttfa_p95_s=latency_s / 2)  # TTFA alone decides
    plan = CapacityPlan((LONG_TEXT,), criteria, max_concurrency=3, level_duration_s=0.0, min_requests_per_listener=3,
                        is_seeded=True, seed=LONG_SEED)  # fmt: skip
    options = LoadOptions(url=speech_url(one_row_url), prebuffer_s=1.0)
    search = find_capacity(options, plan)
    levels = search.levels
    print(f"\nlatency alone {latency_s:.3f} s; TTFA p95 by level {[lv['ttfa_p95_s'] for lv in levels]}")
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    assert [lv["num_requests"] for lv in levels] == [3, 6] and all(lv["num_ok"] == lv["num_requests"] for lv in levels)
    assert all(lv["audio_s"] > 0 for lv in levels)
    assert (search.capacity, search.stop_reason) == (1, "ttfa")
    assert levels[1]["failed_on"] == ["ttfa"]


def test_the_command_writes_the_report_and_plot(tmp_path: Path, one_row_url: str) -> None:
    out, plot = tmp_path / "capacity.json", tmp_path / "capacity.png"
    result = run_cli("loadtest", one_row_url, "--find-capacity", "--max-concurrency", "2", "--level-duration-s", "0",
                     "--min-requests-per-listener", "1", "--max-new-tokens", "12", "--max-ttfa-p95-s", "30",
                     "--min-continuity", "0", "--no-send-buffer", "--label", "one row", "--json", str(out),
                     "--plot", str(plot))  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert (report["capacity"], report["stop_reason"], report["label"]) == (2, "max_concurrency", "one row")
    assert report["criteria"] == {"min_continuity": 0.0, "max_ttfa_p95_s": 30.0, "max_refused_share": 0.5}
    assert [lv["status_counts"] for lv in report["levels"]] == [{"200": 1}, {"200": 2}]
    assert all(lv["passed"] and lv["failed_on"] == [] for lv in report["levels"])
    assert report["config"]["prebuffer_ms"] == 1000.0 and "playback_buffer_s" not in report["config"]["body"]
    assert set(report["machine"]) >= {"cpu_model_name", "cpu_family", "cpu_model", "isa", "cpu_count"}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "capacity: 2 listeners" in result.stderr


def test_the_buffer_is_sent_by_default_and_a_level_with_no_answer_fails(tmp_path: Path) -> None:
    out = tmp_path / "capacity.json"
    result = run_cli("loadtest", "http://127.0.0.1:9", "--find-capacity", "--level-duration-s", "0",
                     "--min-requests-per-listener", "1", "--prebuffer-ms", "500", "--json", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["config"]["body"]["playback_buffer_s"] == 0.5
    assert (report["capacity"], report["stop_reason"]) == (0, "continuity")  # nothing listens on port 9


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--concurrency", "2"), "--find-capacity chooses its own levels"),
        (("--sweep", "1,2"), "--find-capacity chooses its own levels"),
        (("--max-concurrency", "0"), "must be at least 1"),
        (("--min-continuity", "1.5"), "--min-continuity must be within 0..1"),
        (("--max-ttfa-p95-s", "0"), "--max-ttfa-p95-s must be positive"),
        (("--level-duration-s", "-1"), "--level-duration-s must be >= 0"),
    ],
)
def test_bad_capacity_flags_are_one_clear_message_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "capacity.json"
    result = run_cli("loadtest", "http://127.0.0.1:9", "--find-capacity", *args, "--json", str(out))
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert not out.exists()
