"""The published OpenAPI schema is the validation: schemathesis, positive and negative, against a live server.

Every check schemathesis has for a response runs (no 5xx, status codes, content types and bodies as the schema
states, positive data accepted, negative data rejected). What the schema cannot state is documented in the field
descriptions and allowed here by name, no wider: a schema-valid ``input`` may still hold nothing speakable (only
markup or control tokens) or be SSML outside the subset, and a voice string may not decode or a mix be malformed:
each a documented 400 (:data:`SEMANTIC_400_CODES`, :data:`SEMANTIC_400_MESSAGES`); an ``input`` over
``max_input_chars`` is refused with 413; a schema-valid voice name that is not saved is a 404.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError
from schemathesis.generation import GenerationMode

from tests.server.conftest import running_server
from turbotts.server.schemas import VoiceCreate

OPERATIONS = ("/v1/audio/speech", "/v1/audio/speech/captioned")
MAX_EXAMPLES = 40
# documented in the input and voice descriptions, which the schema's types and patterns cannot say: input with
# nothing speakable, SSML outside the subset, a voice string that does not decode, a malformed voice mix
SEMANTIC_400_CODES = {"invalid_ssml", "invalid_voice_mix"}
SEMANTIC_400_MESSAGES = ("the input has nothing to say", "the SSML has nothing to say", "the voice ")


def _conform(url: str, mode: GenerationMode) -> Counter[tuple[str, int]]:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    schema.config.update(base_url=url)
    checks = schema.config.checks
    checks.negative_data_rejection.expected_statuses = [*checks.negative_data_rejection.expected_statuses, "413"]
    checks.positive_data_acceptance.expected_statuses = [*checks.positive_data_acceptance.expected_statuses, "400"]
    statuses: Counter[tuple[str, int]] = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path not in OPERATIONS or operation.method.upper() != "POST":
            continue

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
            suppress_health_check=list(HealthCheck),
        )  # fmt: skip
        def check(case: schemathesis.Case) -> None:
            if mode is GenerationMode.POSITIVE and isinstance(case.body, dict):
                case.body["max_new_tokens"] = 2  # quick synthesis (still schema-valid)
            response = case.call(timeout=60)
            statuses[case.operation.path, response.status_code] += 1
            case.validate_response(response)  # every schemathesis check: a mismatch raises, naming it
            if mode is GenerationMode.POSITIVE and response.status_code == 400:
                error = response.json()["error"]
                is_documented = error["message"].startswith(SEMANTIC_400_MESSAGES)
                assert error["code"] in SEMANTIC_400_CODES or is_documented, (case.body, response.text[:300])

        check()
    return statuses


def test_every_format_and_stream_conforms(tmp_path: Path) -> None:
    """Each response_format and stream_format, which random cases may miss: status, content type, body."""
    with running_server(tmp_path, max_new_tokens=2, max_input_chars=300) as (url, _):
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
        schema.config.update(base_url=url)
        speech, captioned = schema["/v1/audio/speech"]["POST"], schema["/v1/audio/speech/captioned"]["POST"]
        bodies = [{"response_format": fmt} for fmt in ("mp3", "opus", "aac", "flac", "wav", "pcm")]
        cases = [speech.Case(body={"input": "Hello.", "max_new_tokens": 2, **extra}) for extra in bodies]
        cases.append(speech.Case(body={"input": "Hello.", "max_new_tokens": 2, "stream_format": "sse"}))
        cases += [captioned.Case(body={"input": "Hello.", "max_new_tokens": 2, "stream": is_stream})
                  for is_stream in (False, True)]  # fmt: skip
        for case in cases:
            response = case.call(timeout=60)
            assert response.status_code == 200, response.text[:300]
            case.validate_response(response)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_schemathesis_finds_no_schema_mismatch(tmp_path: Path, mode: GenerationMode) -> None:
    with running_server(tmp_path, max_new_tokens=2, max_input_chars=300, rate_limit_rps=0.0) as (url, _):
        statuses = _conform(url, mode)
    for path in OPERATIONS:
        codes: dict[int, Any] = {code: n for (p, code), n in statuses.items() if p == path}
        if mode is GenerationMode.POSITIVE:
            assert codes.get(200, 0) >= MAX_EXAMPLES // 4, statuses  # mostly synthesized, not refused
        else:
            assert codes.get(422, 0) > 0 and 200 not in codes, statuses


VOICE_BODIES: list[dict[str, Any]] = [
    {"name": "a", "seed": 1}, {"name": "a", "seed": 1, "voice": None}, {"name": "a", "voice": "x"},
    {"name": "a", "mix": "alloy+nova"}, {"name": "a", "spk_smp": "x", "transcript": "hi"},
    {"name": "a"}, {"name": "a", "seed": 1, "voice": "x"}, {"name": "a", "spk_smp": "x"},
    {"name": "a", "seed": 1, "transcript": "hi"}, {"name": "a", "seed": 1, "spk_smp": "x", "transcript": "hi"},
    {"name": "a", "seed": None, "mix": "a+b", "transcript": None}, {"name": "a", "seed": None},
]  # fmt: skip


@pytest.mark.parametrize("body", VOICE_BODIES, ids=lambda body: "-".join(f"{k}={v}" for k, v in body.items()))
def test_the_voice_body_schema_states_the_one_source_rule(body: dict[str, Any]) -> None:
    """VoiceCreate's model validator (exactly one source; the transcript with spk_smp only), as its schema says it."""
    schema = VoiceCreate.model_json_schema()
    is_schema_valid = jsonschema.Draft202012Validator(schema).is_valid(body)
    try:
        VoiceCreate.model_validate(body)
        is_valid = True
    except ValidationError:
        is_valid = False
    assert is_schema_valid == is_valid
