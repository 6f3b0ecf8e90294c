"""Numbers are numbers and booleans booleans: ``seed: true`` or ``speed: false`` is a 422 naming the field, through
a real server (JSON ``true`` used to pass as 1). Integers are JSON Schema's: ``4.0`` is 4, ``4.5`` is refused."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

SPEECH = "/v1/audio/speech"
REFUSED: list[tuple[str, Any]] = [
    ("seed", True), ("seed", False), ("seed", 1.5), ("seed", "7"),
    ("speed", True), ("speed", False), ("speed", "1.5"),
    ("temperature", True), ("top_p", True), ("top_k", True), ("top_k", "5"),
    ("repetition_penalty", True), ("max_new_tokens", True), ("max_new_tokens", 4.5),
    ("refine_text", 1), ("refine_text", "true"), ("playback_buffer_s", True), ("playback_buffer_s", "1"),
]  # fmt: skip


@pytest.mark.parametrize(("field", "value"), REFUSED, ids=lambda v: repr(v))
def test_a_wrong_type_is_a_422_naming_the_field(http: httpx.Client, field: str, value: Any) -> None:
    response = http.post(SPEECH, json={"input": "Hello.", "response_format": "pcm", field: value})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["param"] == field or field in error["message"], error


@pytest.mark.parametrize(("field", "value"), REFUSED[:8], ids=lambda v: repr(v))
def test_the_captioned_and_voice_bodies_are_as_strict(http: httpx.Client, field: str, value: Any) -> None:
    response = http.post(f"{SPEECH}/captioned", json={"input": "Hello.", field: value})
    assert response.status_code == 422, response.text
    assert field in response.text
    stream = http.post(f"{SPEECH}/captioned", json={"input": "Hello.", "stream": 1})
    assert stream.status_code == 422 and "stream" in stream.text
    voice = http.post("/v1/voices", json={"name": "strict", "seed": True})
    assert voice.status_code == 422 and "seed" in voice.text


def test_an_integer_speed_and_real_numbers_are_still_taken(http: httpx.Client) -> None:
    # JSON Schema's integer holds 4.0: an integral float is the integer
    payload = {"input": "Hello.", "response_format": "pcm", "max_new_tokens": 4.0, "seed": 3, "speed": 2,
               "temperature": 1, "top_p": 0.5, "top_k": 20, "refine_text": False}  # fmt: skip
    response = http.post(SPEECH, json=payload)
    assert response.status_code == 200, response.text
    assert len(response.content) > 0
