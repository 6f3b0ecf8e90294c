"""/metrics values move with the traffic, not only their names (Prometheus prints HELP/TYPE lines regardless).

One real server on loopback; samples are parsed with prometheus_client's own text parser.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.server.audio import decode
from tests.server.conftest import running_server

SPEECH = "/v1/audio/speech"
ROUTE = {"route": SPEECH, "status": "200"}


def samples(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample on /metrics: (name, labels) -> value."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(table: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return table.get((name, frozenset(labels.items())), 0.0)


def test_a_request_moves_counts_sums_and_gauges(tmp_path: Path) -> None:
    with running_server(tmp_path, cache_max_bytes=0) as (url, _):
        before = samples(url)
        body = {"input": "Counting on the meters.", "seed": 5, "response_format": "wav", "max_new_tokens": 24}
        response = httpx.post(f"{url}{SPEECH}", json=body, timeout=300)
        assert response.status_code == 200
        rate, audio = decode(response.content, "wav")
        missing_voice = httpx.post(f"{url}{SPEECH}", json={"input": "hi", "voice": "nobody"}, timeout=30)
        assert missing_voice.status_code == 404
        after = samples(url)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("turbotts_request_duration_seconds_count", **ROUTE) == 1
    assert moved("turbotts_request_duration_seconds_sum", **ROUTE) > 0
    assert moved("turbotts_request_duration_seconds_count", route=SPEECH, status="404") == 1
    assert moved("turbotts_errors_total", status="404") == 1
    assert moved("turbotts_time_to_first_audio_seconds_count", format="wav") == 1
    ttfa_s = moved("turbotts_time_to_first_audio_seconds_sum", format="wav")
    assert 0 < ttfa_s <= moved("turbotts_request_duration_seconds_sum", **ROUTE)  # first audio before the end
    assert moved("turbotts_real_time_factor_count") == 1 and moved("turbotts_real_time_factor_sum") > 0
    assert abs(moved("turbotts_audio_seconds_total") - audio.size / rate) < 512 / rate  # what the client got
    assert moved("turbotts_engine_requests_total") == 1
    assert moved("turbotts_engine_steps") >= (audio.size + 256) // 512  # at least one step per frame heard
    assert value(after, "turbotts_requests_in_flight") == 0
    assert value(after, "turbotts_segments_in_flight") == 0
    assert value(after, "turbotts_segments_in_flight_peak") == 1  # one segment: nothing ahead of it
    assert value(after, "turbotts_running_sequences") == 0
    assert value(after, "turbotts_free_kv_slots") == value(before, "turbotts_free_kv_slots") > 0
