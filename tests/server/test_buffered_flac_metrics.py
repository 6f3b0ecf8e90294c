"""A buffered format (flac) still counts its time to first audio, which admission control learns from."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.server.conftest import running_server


def _ttfa_count(metrics_text: str, fmt: str) -> float:
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "turbotts_time_to_first_audio_seconds":
            for sample in family.samples:
                if sample.name.endswith("_count") and sample.labels.get("format") == fmt:
                    return sample.value
    return 0.0


def test_flac_requests_observe_time_to_first_audio(tmp_path: Path) -> None:
    with running_server(tmp_path) as (url, _server), httpx.Client(base_url=url, timeout=60) as client:
        assert _ttfa_count(client.get("/metrics").text, "flac") == 0
        for seed in (1, 2):
            response = client.post(
                "/v1/audio/speech", json={"model": "tts-1", "input": "你好", "response_format": "flac", "seed": seed}
            )
            assert response.status_code == 200
            assert response.content[:4] == b"fLaC"
        assert _ttfa_count(client.get("/metrics").text, "flac") == 2
