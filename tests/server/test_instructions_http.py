"""``instructions`` through a real server: the table's controls act on the audio (seeded, exact samples), and the
``X-TurboTTS-Instructions`` header and the SSE ``done`` event say what was applied and what was ignored."""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
import pytest

from tests.server.audio import decode

SPEECH = "/v1/audio/speech"
TEXT = "I have three cats. They sleep all day."


@pytest.fixture()
def http(exact_http: httpx.Client) -> httpx.Client:
    """The watermark-free server: these tests compare two requests' audio sample for sample."""
    return exact_http


def body(**extra: Any) -> dict[str, Any]:
    return {"input": TEXT, "response_format": "pcm", "seed": 11, "max_new_tokens": 8, **extra}


def pcm(http: httpx.Client, **extra: Any) -> tuple[np.ndarray, httpx.Headers]:
    response = http.post(SPEECH, json=body(**extra))
    assert response.status_code == 200, response.text
    return decode(response.content, "pcm")[1], response.headers


def report(headers: httpx.Headers) -> dict[str, Any]:
    return json.loads(headers["x-turbotts-instructions"])


def test_speak_slowly_is_the_same_audio_as_a_lower_speed(http: httpx.Client) -> None:
    slow, headers = pcm(http, instructions="speak slowly")
    lowered, plain_headers = pcm(http, speed=0.8)
    normal, _ = pcm(http)
    assert slow.size == lowered.size and np.array_equal(slow, lowered)
    assert not np.array_equal(slow, normal)  # [speed_0] and its 1.02 stretch changed the audio
    assert report(headers) == {
        "applied": [{"instruction": "speak slowly", "control": "pace", "effect": "speed x 0.8"}],
        "ignored": [],
    }
    assert "x-turbotts-warning" not in headers
    assert "x-turbotts-instructions" not in plain_headers  # no instructions, nothing to report


def test_pace_multiplies_the_requests_speed(http: httpx.Client) -> None:
    fast, _ = pcm(http, instructions="faster", speed=2.0)
    assert np.array_equal(fast, pcm(http, speed=2.5)[0])


def test_laughter_is_the_refine_token_and_turns_refine_on(http: httpx.Client) -> None:
    named, headers = pcm(http, instructions="with laughter")
    tokens, _ = pcm(http, instructions="[laugh_2]", refine_text=True)
    without, _ = pcm(http, refine_text=True)
    assert np.array_equal(named, tokens)
    applied = {"instruction": "with laughter", "control": "laughter", "effect": "[laugh_2]"}
    assert report(headers)["applied"] == [applied]
    assert without.size > 0


def test_refine_tokens_with_refine_off_are_reported_ignored(http: httpx.Client) -> None:
    audio, headers = pcm(http, instructions="slowly, laugh", refine_text=False)
    assert np.array_equal(audio, pcm(http, speed=0.8, refine_text=False)[0])
    assert report(headers)["ignored"] == ["laugh (refine_text is false)"]
    assert "instructions ignored: 1 not understood" in headers["x-turbotts-warning"]


def test_sse_done_event_and_header_report_applied_and_ignored(http: httpx.Client) -> None:
    payload = body(instructions="Speak quickly, sound cheerful, pause", stream_format="sse", refine_text=True)
    with http.stream("POST", SPEECH, json=payload) as response:
        assert response.status_code == 200, response.read()
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
        header = report(response.headers)
        warning = response.headers["x-turbotts-warning"]
    done = events[-1]
    assert done["type"] == "speech.audio.done"
    assert done["instructions"] == header
    assert header == {
        "applied": [
            {"instruction": "Speak quickly", "control": "pace", "effect": "speed x 1.25"},
            {"instruction": "pause", "control": "pauses", "effect": "[break_6]"},
        ],
        "ignored": ["sound cheerful"],
    }
    assert "instructions ignored" in warning


def test_unknown_instruction_keeps_todays_warning(http: httpx.Client) -> None:
    audio, headers = pcm(http, instructions="Speak like a pirate. Ünïcödé\n")
    assert "instructions ignored" in headers["x-turbotts-warning"]
    assert report(headers) == {"applied": [], "ignored": ["Speak like a pirate", "Ünïcödé"]}
    assert np.array_equal(audio, pcm(http)[0])  # nothing applied: the audio is the plain request's
