"""SSE streaming, the voice API and the operations endpoints, over plain HTTP."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import numpy as np

from tests.server.conftest import MAX_NEW_TOKENS
from turbotts.model.speaker import encode_voice, sample_random_voice
from turbotts.server.voices.store import OPENAI_VOICES, VoiceStore
from turbotts.sources import ModelSource, speaker_stats_for

SPEECH = "/v1/audio/speech"


def test_sse_sends_audio_deltas_then_done_with_usage(http: httpx.Client) -> None:
    body = {"input": "Hello there. Bye now.", "voice": "nova", "stream_format": "sse", "response_format": "pcm",
            "seed": 3, "max_new_tokens": MAX_NEW_TOKENS}  # fmt: skip
    with http.stream("POST", SPEECH, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: ") :]) for line in response.iter_lines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert deltas and events[-1]["type"] == "speech.audio.done"
    pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert len(pcm) > 0 and len(pcm) % 2 == 0
    usage = events[-1]["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    plain = http.post(SPEECH, json={**body, "stream_format": "audio"}).content
    assert plain == pcm  # same seed: the SSE audio is the same audio


def test_builtin_voices_and_saved_voice_lifecycle(http: httpx.Client) -> None:
    names = {v["name"] for v in http.get("/v1/voices").json()["data"]}
    assert set(OPENAI_VOICES) <= names

    created = http.post("/v1/voices", json={"name": "narrator", "seed": 42})
    assert created.status_code == 201 and created.json()["seed"] == 42
    assert http.post("/v1/voices", json={"name": "narrator", "seed": 1}).status_code == 409
    assert http.post("/v1/voices", json={"name": "alloy", "seed": 1}).status_code == 409
    assert http.post("/v1/voices", json={"name": "both", "seed": 1, "voice": "x"}).status_code == 422

    stats = speaker_stats_for(ModelSource(load_format="dummy", dummy_size="tiny"))
    voice_string = encode_voice(sample_random_voice(stats, 9))
    assert http.post("/v1/voices", json={"name": "from-string", "voice": voice_string}).status_code == 201
    assert http.post("/v1/voices", json={"name": "broken", "voice": "不是声音"}).status_code == 400

    def pcm(voice: str) -> bytes:
        body = {"input": "Voice test.", "voice": voice, "response_format": "pcm", "seed": 1, "max_new_tokens": 6}
        response = http.post(SPEECH, json=body)
        assert response.status_code == 200, response.text
        return response.content

    assert pcm("from-string") == pcm(voice_string)  # a saved voice string is the same voice
    assert pcm("narrator") != pcm("from-string")

    assert http.delete("/v1/voices/narrator").status_code == 204
    assert http.delete("/v1/voices/narrator").status_code == 404
    assert http.post(SPEECH, json={"input": "hi", "voice": "narrator"}).status_code == 404
    assert http.delete("/v1/voices/alloy").status_code == 400


def test_saved_voices_survive_a_restart(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path / "v.sqlite3")
    store.add("kept", seed=5)
    store.close()
    reopened = VoiceStore(tmp_path / "v.sqlite3")
    assert reopened.get("kept").seed == 5
    reopened.close()


def test_health_ready_and_metrics(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok", "detail": None}
    assert http.get("/readyz").status_code == 200
    secret_text = "Zebra quantum marmalade."
    assert http.post(SPEECH, json={"input": secret_text, "max_new_tokens": 4}).status_code == 200
    http.post(SPEECH, json={"input": "hi", "voice": "missing"})
    text = http.get("/metrics").text
    for name in ("turbotts_request_duration_seconds", "turbotts_time_to_first_audio_seconds",
                 "turbotts_real_time_factor", "turbotts_queue_depth", "turbotts_running_batch_size",
                 "turbotts_tokens_per_second", "turbotts_requests_in_flight", "turbotts_errors_total"):  # fmt: skip
        assert name in text
    assert 'turbotts_errors_total{status="404"}' in text
    assert "Zebra" not in text and "marmalade" not in text  # the text is never a label
    assert np.isfinite(float(next(line.split()[-1] for line in text.splitlines()
                                  if line.startswith("turbotts_requests_in_flight"))))  # fmt: skip
