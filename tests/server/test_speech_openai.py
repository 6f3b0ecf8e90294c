"""The official ``openai`` client against the real server: every format, whole and streamed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.server.audio import EXPECTED_RATE_HZ, decode
from tests.server.conftest import MAX_NEW_TOKENS, SAMPLE_RATE_HZ

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MAX_DURATION_S = MAX_NEW_TOKENS * 512 / SAMPLE_RATE_HZ
EXTRA = {"seed": 7, "max_new_tokens": MAX_NEW_TOKENS}


@pytest.fixture()
def client(server_url: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=f"{server_url}/v1", api_key="x", timeout=120, max_retries=0) as openai_client:
        yield openai_client


def _check(data: bytes, fmt: str, reference_len: int) -> None:
    rate, samples = decode(data, fmt)
    assert rate == EXPECTED_RATE_HZ[fmt]
    duration_s = len(samples) / rate
    reference_s = reference_len / SAMPLE_RATE_HZ
    assert 0 < duration_s <= MAX_DURATION_S + 0.1
    # codecs pad (mp3/aac priming and frame fill, opus pre-skip): within 100 ms of the same seed's PCM
    assert abs(duration_s - reference_s) < 0.1, (fmt, duration_s, reference_s)


@pytest.fixture(scope="module")
def reference_len(server_url: str) -> int:
    with OpenAI(base_url=f"{server_url}/v1", api_key="x", timeout=120, max_retries=0) as openai_client:
        pcm = openai_client.audio.speech.create(
            model="tts-1", voice="alloy", input="Hello there, world.", response_format="pcm", extra_body=EXTRA
        ).content
    assert len(pcm) % 2 == 0 and len(pcm) > 0
    return len(pcm) // 2


@pytest.mark.parametrize("fmt", FORMATS)
def test_create_returns_decodable_audio_in_every_format(client: OpenAI, reference_len: int, fmt: str) -> None:
    response = client.audio.speech.create(
        model="tts-1",
        voice="alloy",
        input="Hello there, world.",
        response_format=fmt,
        extra_body=EXTRA,  # type: ignore[arg-type]
    )
    _check(response.content, fmt, reference_len)


@pytest.mark.parametrize("fmt", FORMATS)
def test_streaming_response_in_every_format(client: OpenAI, reference_len: int, fmt: str) -> None:
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts",
        voice="alloy",
        input="Hello there, world.",
        response_format=fmt,
        extra_body=EXTRA,  # type: ignore[arg-type]
    ) as response:
        assert response.headers["x-request-id"]
        chunks = list(response.iter_bytes())
    _check(b"".join(chunks), fmt, reference_len)


def test_same_seed_same_audio_and_voice_object_form(client: OpenAI) -> None:
    def pcm(voice: object) -> bytes:
        return client.audio.speech.create(
            model="tts-1",
            voice=voice,
            input="Same words.",
            response_format="pcm",
            extra_body=EXTRA,  # type: ignore[arg-type]
        ).content

    assert pcm("coral") == pcm({"id": "coral"})
    assert pcm("coral") != pcm("echo")  # each OpenAI name is its own fixed voice


def test_speed_changes_duration_by_time_stretch(client: OpenAI) -> None:
    def duration(speed: float) -> float:
        body = client.audio.speech.create(
            model="tts-1", voice="alloy", input="Hello there, world.", response_format="pcm", speed=speed,
            extra_body={**EXTRA, "max_new_tokens": MAX_NEW_TOKENS},
        ).content  # fmt: skip
        return len(body) / 2 / SAMPLE_RATE_HZ

    normal, fast = duration(1.0), duration(4.0)
    # [speed_9] plus a 3.29x stretch: random tiny weights ignore the token, so the stretch alone shows
    assert fast < normal / 2.5


def test_instructions_and_control_tokens(client: OpenAI) -> None:
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input="Hello [uv_break] world [laugh].", response_format="wav",
        instructions="Speak cheerfully.", extra_body=EXTRA,
    ) as response:  # fmt: skip
        assert "instructions ignored" in response.headers["x-turbotts-warning"]
        assert decode(response.read(), "wav")[1].size > 0
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input="Hello world.", response_format="pcm",
        instructions="[oral_2][laugh_0][break_6]", extra_body={**EXTRA, "refine_text": True},
    ) as response:  # fmt: skip
        assert "x-turbotts-warning" not in response.headers
        assert len(response.read()) > 0
