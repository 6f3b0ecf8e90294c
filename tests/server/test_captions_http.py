"""Captions over real HTTP: ``speech.audio.segment`` events whose times are the decoded sample counts."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.server.audio import decode
from tests.server.conftest import MAX_NEW_TOKENS, SAMPLE_RATE_HZ, running_server

SPEECH = "/v1/audio/speech"
SEGMENT = "speech.audio.segment"
THREE_SENTENCES = "I have 3 cats. They sleep all day. Dogs bark 2 times."


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server that cuts every sentence into its own segment (20 characters at most)."""
    with running_server(tmp_path_factory.mktemp("captions"), max_segment_chars=20) as (base_url, _):
        yield base_url


@pytest.fixture()
def client(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=120) as http:
        yield http


def body(text: str, **extra: Any) -> dict[str, Any]:
    return {"input": text, "voice": "nova", "seed": 5, "max_new_tokens": MAX_NEW_TOKENS, "response_format": "pcm",
            **extra}  # fmt: skip


def sse_events(client: httpx.Client, payload: dict[str, Any]) -> list[dict[str, Any]]:
    with client.stream("POST", SPEECH, json={**payload, "stream_format": "sse"}) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line[len("data: ") :]) for line in response.iter_lines() if line.startswith("data: ")]


def samples_of(seconds: float) -> int:
    """A time from an event back to its sample count (exact: the server divides a count by the rate)."""
    count = seconds * SAMPLE_RATE_HZ
    assert abs(count - round(count)) < 1e-6, seconds
    return round(count)


def check_tiling(segments: list[dict[str, Any]], num_samples: int) -> None:
    """Captions start at 0, each ends where the next starts, the last ends at the last decoded sample."""
    assert [s["index"] for s in segments] == list(range(len(segments)))
    assert samples_of(segments[0]["start"]) == 0
    for before, after in itertools.pairwise(segments):
        assert samples_of(before["end"]) == samples_of(after["start"])
    assert samples_of(segments[-1]["end"]) == num_samples
    assert all(s["end"] > s["start"] for s in segments)


def test_sse_segment_events_match_the_decoded_sample_counts(client: httpx.Client) -> None:
    events = sse_events(client, body(THREE_SENTENCES))
    assert events[-1]["type"] == "speech.audio.done"
    segments = [e for e in events if e["type"] == "speech.audio.segment"]
    assert set(segments[0]) == {"type", "index", "text", "start", "end"}
    # normalized, as spoken: digits become words
    assert [s["text"] for s in segments] == ["I have three cats.", "They sleep all day.", "Dogs bark two times."]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    _, samples = decode(pcm, "pcm")
    check_tiling(segments, samples.size)
    # each segment event comes once all of that segment's audio was sent
    num_sent = 0
    for event in events:
        if event["type"] == "speech.audio.delta":
            num_sent += len(base64.b64decode(event["audio"])) // 2
        elif event["type"] == "speech.audio.segment":
            assert num_sent >= samples_of(event["end"])
    # and the events change nothing in the audio
    assert client.post(SPEECH, json=body(THREE_SENTENCES)).content == pcm


@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_segment_times_follow_the_time_stretch(client: httpx.Client, speed: float) -> None:
    events = sse_events(client, body(THREE_SENTENCES, speed=speed))
    segments = [e for e in events if e["type"] == "speech.audio.segment"]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    num_samples = len(pcm) // 2
    check_tiling(segments, num_samples)
    plain = [e for e in sse_events(client, body(THREE_SENTENCES)) if e["type"] == "speech.audio.segment"]
    # speed 2 with [speed_9] leaves a residual stretch: the audio is shorter, the captions with it
    assert (segments[-1]["end"] < plain[-1]["end"]) == (speed > 1)


def test_a_wav_stream_has_the_same_timeline(client: httpx.Client) -> None:
    events = sse_events(client, body(THREE_SENTENCES, response_format="wav"))
    segments = [e for e in events if e["type"] == "speech.audio.segment"]
    wav = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    _, samples = decode(wav, "wav")
    check_tiling(segments, samples.size)


CAPTIONED = "/v1/audio/speech/captioned"


def test_captioned_json_holds_the_audio_and_its_segments(client: httpx.Client) -> None:
    response = client.post(CAPTIONED, json=body(THREE_SENTENCES, response_format="wav"))
    assert response.status_code == 200, response.text
    result = response.json()
    assert set(result) == {"audio", "response_format", "segments", "usage"} and result["response_format"] == "wav"
    _, samples = decode(base64.b64decode(result["audio"]), "wav")
    check_tiling(result["segments"], samples.size)
    assert result["segments"][0]["text"] == "I have three cats."
    assert result["usage"]["output_tokens"] > 0
    # the same segments as the SSE events, and the same audio as the plain endpoint
    events = sse_events(client, body(THREE_SENTENCES, response_format="wav"))
    assert [{k: e[k] for k in ("index", "text", "start", "end")} for e in events if e["type"] == SEGMENT] == (
        result["segments"]
    )
    assert samples.size == decode(client.post(SPEECH, json=body(THREE_SENTENCES, response_format="wav")).content,
                                  "wav")[1].size  # fmt: skip


def test_captioned_ndjson_streams_deltas_segments_and_done(client: httpx.Client) -> None:
    with client.stream("POST", CAPTIONED, json=body(THREE_SENTENCES, stream=True)) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        events = [json.loads(line) for line in response.iter_lines() if line]
    assert events[-1]["type"] == "speech.audio.done" and "usage" in events[-1]
    segments = [e for e in events if e["type"] == SEGMENT]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    check_tiling(segments, len(pcm) // 2)
    assert len(segments) == 3


def test_captioned_errors_are_json_4xx(client: httpx.Client) -> None:
    response = client.post(CAPTIONED, json=body("!!!"))
    assert response.status_code == 400 and "nothing to say" in response.json()["error"]["message"]
    response = client.post(CAPTIONED, json={**body("hi"), "stream": "sometimes"})
    assert response.status_code == 422 and response.json()["error"]["param"] == "stream"


@pytest.mark.parametrize("fmt", ["mp3", "opus", "flac"])
def test_encoded_formats_have_the_same_timeline_and_events_after_their_audio(client: httpx.Client, fmt: str) -> None:
    """Times count the PCM timeline whatever the encoding; each event follows bytes sent after its last sample."""
    reference = [e for e in sse_events(client, body(THREE_SENTENCES)) if e["type"] == SEGMENT]
    events = sse_events(client, body(THREE_SENTENCES, response_format=fmt))
    assert [e for e in events if e["type"] == SEGMENT] == reference
    assert events[0]["type"] == "speech.audio.delta"  # never a caption before any audio
    if fmt == "flac":  # sent whole: the one delta, then every caption
        assert [e["type"] for e in events] == ["speech.audio.delta"] + [SEGMENT] * 3 + ["speech.audio.done"]


def test_the_openapi_schema_describes_the_captioned_endpoint(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    operation = schema["paths"]["/v1/audio/speech/captioned"]["post"]
    ok = operation["responses"]["200"]["content"]
    assert ok["application/json"]["schema"]["$ref"].endswith("/CaptionedSpeech") and "application/x-ndjson" in ok
    components = schema["components"]["schemas"]
    assert set(components["CaptionSegment"]["properties"]) == {"index", "text", "start", "end", "voice"}
    assert "stream" in components["CaptionedSpeechRequest"]["properties"]
    input_format = components["SpeechRequest"]["properties"]["input_format"]
    assert {"enum": ["text", "ssml"], "type": "string"} in input_format["anyOf"]
