"""Every error is OpenAI-shaped JSON with the right status, and every response carries X-Request-ID."""

from __future__ import annotations

import httpx
import pytest

SPEECH = "/v1/audio/speech"
OK = {"model": "tts-1", "input": "hello", "voice": "alloy", "max_new_tokens": 4}


def _assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-request-id"]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code
    return error


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({**OK, "input": "😀 <b></b> \u200b!!!"}, 400, "invalid_input"),  # nothing left after cleaning
        ({**OK, "input": "x" * 4097}, 413, "input_too_long"),
        ({**OK, "voice": "no-such-voice"}, 404, "voice_not_found"),
        ({**OK, "voice": {"id": "no-such-voice"}}, 404, "voice_not_found"),
        ({**OK, "voice": "这不是声音"}, 400, "invalid_input"),  # not a valid voice string
        ({**OK, "model": "whisper-1"}, 404, "model_not_found"),
        ({**OK, "speed": 4.5}, 422, "validation_error"),
        ({**OK, "response_format": "ogg"}, 422, "validation_error"),
        ({**OK, "top_p": 0}, 422, "validation_error"),
        ({"model": "tts-1", "voice": "alloy"}, 422, "validation_error"),
        ({**OK, "unknown_field": 1}, 422, "validation_error"),
    ],
)
def test_user_errors_have_status_and_openai_shape(
    http: httpx.Client, body: dict[str, object], status: int, code: str
) -> None:
    _assert_error(http.post(SPEECH, json=body), status, code)


def test_validation_error_names_the_param(http: httpx.Client) -> None:
    error = _assert_error(http.post(SPEECH, json={**OK, "speed": 9}), 422)
    assert error["param"] == "speed"


def test_malformed_json_and_unknown_routes_are_json_too(http: httpx.Client) -> None:
    _assert_error(http.post(SPEECH, content=b"{not json", headers={"content-type": "application/json"}), 422)
    _assert_error(http.get("/v1/nothing-here"), 404)
    _assert_error(http.put(SPEECH, json=OK), 405)


def test_request_id_is_echoed_or_made_up(http: httpx.Client) -> None:
    assert http.get("/healthz", headers={"X-Request-ID": "abc-123"}).headers["x-request-id"] == "abc-123"
    made_up = http.get("/healthz", headers={"X-Request-ID": "bad id with spaces"}).headers["x-request-id"]
    assert made_up.startswith("req_")
    response = http.post(SPEECH, json={**OK, "response_format": "pcm"})
    assert response.status_code == 200 and response.headers["x-request-id"].startswith("req_")
