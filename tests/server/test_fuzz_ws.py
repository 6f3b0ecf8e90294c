"""WebSocket message fuzzing on a real server: binary frames, non-JSON text, JSON of the wrong shape, huge
messages, messages after ``end`` and abrupt closes. Each session ends with an error message and a close
code (or ``done``), never an unhandled exception, and a normal session works afterwards.

The scripts are the fuzzer's, :func:`turbotts.bench.fuzz_cases.ws_cases`, each with the outcome it must get.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.server.conftest import running_server
from tests.server.fuzz_util import describe, logged_errors
from turbotts.bench.fuzz_cases import END, WsCase, ws_cases, ws_config
from turbotts.bench.fuzz_client import ws_session

CONFIG = ws_config(max_new_tokens=2)
CASES = ws_cases(CONFIG)
NORMAL = (CONFIG, '{"type": "text", "text": "A normal session. It still works."}', END)


@pytest.fixture(scope="module")
def ws_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(tmp_path_factory.mktemp("fuzz_ws"), max_new_tokens=2, max_input_chars=300) as (url, _):
        yield url.replace("http://", "ws://") + "/v1/audio/speech/ws"


def test_the_scripts_cover_each_kind_of_bad_input() -> None:
    expected = {case.expect for case in CASES}
    assert expected == {"ws_done", "ws_error_1003", "ws_error_1008", "ws_closed_1009", "ws_aborted"}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_bad_messages_end_with_an_error_and_a_close_code(ws_url: str, case: WsCase) -> None:
    with logged_errors() as errors:
        outcome = asyncio.run(ws_session(ws_url, case.script))
        after = asyncio.run(ws_session(ws_url, NORMAL))
    assert outcome.label == case.expect, outcome
    if outcome.kind == "error":
        assert outcome.error is not None and outcome.error["message"] and outcome.error["type"]
    if case.expect == "ws_done" and case.name != "ws_valid_empty":
        assert outcome.num_audio_bytes > 0
    assert after.kind == "done" and after.num_audio_bytes > 0, after
    assert not errors, describe(errors)
