"""Fuzz every HTTP operation from the server's own OpenAPI schema: user input never causes a 5xx.

schemathesis generates the cases from ``/openapi.json`` (its pytest plugin does not
run under pytest 9, so hypothesis drives each operation's strategy directly).
"""

from __future__ import annotations

from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.server.conftest import running_server

MAX_EXAMPLES_PER_OPERATION = 25


def test_no_server_errors_and_json_errors(tmp_path: Path) -> None:
    with running_server(tmp_path, max_new_tokens=2, max_input_chars=300) as (url, _):
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
        schema.config.update(base_url=url)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert {op.path for op in operations} >= {"/v1/audio/speech", "/v1/voices", "/v1/voices/{name}"}
        statuses: dict[str, set[int]] = {}
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(
                max_examples=MAX_EXAMPLES_PER_OPERATION,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def check(case: schemathesis.Case) -> None:
                response = case.call(timeout=60)
                statuses.setdefault(case.path, set()).add(response.status_code)
                assert response.status_code < 500, (case.method, case.path, case.body, response.text[:300])
                if response.status_code >= 400:
                    error = response.json()["error"]
                    assert {"message", "type", "param", "code"} <= set(error)

            check()
        assert 200 in statuses["/v1/audio/speech"], statuses  # real synthesis ran, not only rejections
