"""Fuzz every HTTP operation from the server's own OpenAPI schema: user input never causes a 5xx.

schemathesis generates the cases from ``/openapi.json`` (its pytest plugin does not run under
pytest 9, so hypothesis drives each operation's strategy directly).

Schema-valid cases (positive mode) never get a 5xx, each 4xx has a JSON body naming the problem,
and at least one speech request is synthesized (a 200). Most are refused, rightly: the schema
cannot say which model names exist or that the text must hold something speakable (in six runs
of 25 cases, 2 to 8 answered 200, nearly all the rest a 404 for an unknown model or a 400 for
empty or unspeakable text). Invalid cases (negative mode: wrong types, values out of range, missing or
extra fields) get a 4xx whose JSON body names the problem.
"""

from __future__ import annotations

from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode

from tests.server.conftest import running_server

MAX_EXAMPLES_PER_OPERATION = 25
MAX_NEGATIVE_EXAMPLES_PER_OPERATION = 60


def _fuzz(url: str, mode: GenerationMode, max_examples: int) -> dict[tuple[str, str], set[int]]:
    """Statuses per (method, path) of the operations fuzzed in ``mode``; asserts each answer as it comes."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    schema.config.update(base_url=url)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/audio/speech", "/v1/voices", "/v1/voices/{name}"}
    statuses: dict[tuple[str, str], set[int]] = {}
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=max_examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(case: schemathesis.Case) -> None:
            response = case.call(timeout=60)
            statuses.setdefault((case.method.upper(), case.path), set()).add(response.status_code)
            assert response.status_code < 500, (case.method, case.path, case.body, response.text[:300])
            if response.status_code >= 400:
                error = response.json()["error"]
                assert {"message", "type", "param", "code"} <= set(error)
                assert isinstance(error["message"], str) and error["message"], response.text[:300]

        try:
            check()
        except Unsatisfiable:  # negative mode: nothing about this operation can be invalid (no inputs)
            assert mode is GenerationMode.NEGATIVE
    return statuses


def test_no_server_errors_and_json_errors(tmp_path: Path) -> None:
    with running_server(tmp_path, max_new_tokens=2, max_input_chars=300) as (url, _):
        statuses = _fuzz(url, GenerationMode.POSITIVE, MAX_EXAMPLES_PER_OPERATION)
    assert 200 in statuses["POST", "/v1/audio/speech"], statuses  # real synthesis ran, not only rejections


def test_invalid_inputs_get_a_json_4xx_never_a_5xx(tmp_path: Path) -> None:
    with running_server(tmp_path, max_new_tokens=2, max_input_chars=300) as (url, _):
        statuses = _fuzz(url, GenerationMode.NEGATIVE, MAX_NEGATIVE_EXAMPLES_PER_OPERATION)
    for operation in (("POST", "/v1/audio/speech"), ("POST", "/v1/voices")):
        assert 422 in statuses[operation], statuses  # the invalid bodies were sent and refused
