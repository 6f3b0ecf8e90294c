"""Malformed requests as raw bytes over real HTTP on loopback: never a 5xx, always a JSON error naming the
problem, and the server answers normal requests afterwards.

The cases (truncated JSON, wrong Content-Type, 1e308 and 10**400, NaN, invalid UTF-8, lone surrogates,
100 000-deep nesting, 10 MB bodies, an LZMA bomb of a voice, wrong methods, bad query strings, Unicode
paths) are the fuzzer's fixed catalog, :func:`turbotts.bench.fuzz_cases.fixed_http_cases`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.server.conftest import running_server
from tests.server.fuzz_util import describe, logged_errors
from turbotts.bench.fuzz_cases import HttpCase, fixed_http_cases
from turbotts.bench.fuzz_client import exchange

CASES = fixed_http_cases()
# status and a word the error message must hold, for the cases whose answer is worth pinning down
EXPECTED: dict[str, tuple[int, str]] = {
    "truncated_json": (422, "not valid JSON"),
    "empty_body": (422, "body is empty"),
    "json_array": (422, "must be a JSON object"),
    "wrong_content_type": (422, "'text/plain'"),
    "no_content_type": (422, "no Content-Type"),
    "speed_1e308": (422, "speed"),
    "seed_10e400": (422, "seed"),
    "seed_5000_digits": (400, "4300 digits"),
    "speed_nan": (422, "speed"),
    "temperature_infinity": (422, "temperature"),
    "float_overflow": (422, "speed"),
    "invalid_utf8": (400, "not valid UTF-8"),
    "lone_surrogate_input": (422, "input: Value error, holds a lone UTF-16 surrogate"),
    "lone_surrogate_voice": (422, "surrogate"),
    "deeply_nested": (400, "nests too deeply"),
    "ten_mb_input": (413, "larger than 1052176 bytes"),  # refused while read (json_body_limit(300))
    "ten_mb_voice": (413, "larger than 1052176 bytes"),
    "ten_mb_garbage": (413, "larger than 1052176 bytes"),
    "voice_lzma_bomb": (400, "decompresses to more than"),
    "unknown_field": (422, "volume"),
    "put_speech": (405, "method PUT is not allowed on /v1/audio/speech; use POST"),
    "made_up_method": (400, ""),  # httptools >= 0.9 refuses unknown methods while parsing (uvicorn's plain 400)
    "unknown_route": (404, "no route GET /v1/nothing-here"),
    "unicode_route": (404, "/v1/声音"),
    "unicode_path_delete": (404, "does not exist"),
    "long_path_delete": (404, "does not exist"),
    "voice_both": (422, "exactly one of seed and voice"),
    "voice_unicode_name": (422, "name"),
    "raw_byte_in_target": (400, ""),  # uvicorn answers bad framing itself, in plain text
    "garbage_request_line": (400, ""),
    "bad_content_length": (400, ""),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(tmp_path_factory.mktemp("fuzz_http"), max_new_tokens=2, max_input_chars=300) as (url, _):
        yield url


def test_every_pinned_case_exists() -> None:
    assert set(EXPECTED) <= {case.name for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_malformed_request_gets_a_json_4xx_and_the_server_stays_up(server: str, case: HttpCase) -> None:
    port = int(server.rsplit(":", 1)[1])
    with logged_errors() as errors:
        outcome = asyncio.run(exchange("127.0.0.1", port, case.request))
    assert outcome.status is not None, f"no response: {outcome.failure}"
    assert case.accepts(outcome.status), (outcome.status, outcome.body[:300])
    if outcome.status >= 400 and case.needs_json_error:
        assert outcome.error_message, outcome.body[:300]
    if case.name in EXPECTED:
        status, words = EXPECTED[case.name]
        assert outcome.status == status, (outcome.status, outcome.body[:300])
        assert words in (outcome.error_message or ""), outcome.body[:300]
    assert not errors, describe(errors)
    assert httpx.get(f"{server}/healthz", timeout=30).status_code == 200


def test_the_server_still_synthesizes_after_the_malformed_requests(server: str) -> None:
    response = httpx.post(
        f"{server}/v1/audio/speech", json={"input": "Still here.", "response_format": "pcm"}, timeout=120
    )
    assert response.status_code == 200 and len(response.content) > 0
