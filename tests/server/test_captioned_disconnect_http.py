"""A client that leaves ``POST /v1/audio/speech/captioned`` (one JSON object, sent only at the end) before
its answer aborts the synthesis within a few engine steps, as a streamed response does.

Real HTTP on loopback; the engine's state is read from /metrics. The long request is calibrated on this
machine first, as tests/server/test_disconnect_http.py does: heard to the end, it runs hundreds of steps.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx

from tests.server.conftest import running_server
from tests.server.test_disconnect_http import LONG, MIN_FULL_STEPS, SEEDS, _engine

CAPTIONED = "/v1/audio/speech/captioned"


def _full_run_steps(url: str, body: dict[str, object]) -> float:
    *_, steps_before = _engine(url)
    response = httpx.post(f"{url}{CAPTIONED}", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["segments"], response.text
    *_, steps_after = _engine(url)
    return steps_after - steps_before


def _long_captioned_request(url: str) -> tuple[dict[str, object], float]:
    runs = []
    for seed in SEEDS:
        body = {**LONG, "seed": seed}
        runs.append(num_steps := _full_run_steps(url, body))
        if num_steps >= MIN_FULL_STEPS:
            return body, num_steps
    raise AssertionError(f"seeds {SEEDS} end by themselves after {runs} steps: an abort could not be told apart")


def test_leaving_a_captioned_json_request_aborts_its_synthesis(tmp_path: Path) -> None:
    with running_server(tmp_path, max_new_tokens=1500, cache_max_bytes=0) as (url, _):
        long_body, num_full_steps = _long_captioned_request(url)
        max_steps_after_close = num_full_steps // 4
        _, idle_free_slots, steps_at_start = _engine(url)
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps(long_body).encode()
        sock = socket.create_connection((host, int(port)))
        sock.sendall(f"POST {CAPTIONED} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
        deadline = time.monotonic() + 60
        while (state := _engine(url))[0] != 1 or state[2] - steps_at_start < 10:  # decoding, a few steps in
            assert time.monotonic() < deadline, f"the request never started decoding: {state}"
            time.sleep(0.005)
        sock.close()  # before any byte of the answer: a JSON answer comes only at the end
        *_, steps_at_close = _engine(url)
        deadline = time.monotonic() + 120  # a hang guard only: the bound below is in steps
        while (state := _engine(url))[0] != 0:
            num_steps = state[2] - steps_at_close
            assert num_steps <= max_steps_after_close, (
                f"still decoding {num_steps:.0f} steps after the client left (a full run is {num_full_steps:.0f}): "
                "the captioned request was not aborted"
            )
            assert time.monotonic() < deadline, f"the engine request was never aborted: {state}"
            time.sleep(0.01)
        _, free, steps_at_abort = state
        time.sleep(0.5)
        *_, steps_later = _engine(url)
    num_steps_before_close = steps_at_close - steps_at_start
    assert num_steps_before_close < num_full_steps // 2  # the client left in the first half
    assert steps_at_abort - steps_at_close < max_steps_after_close
    assert free == idle_free_slots  # the KV slot came back
    assert steps_later == steps_at_abort  # nothing more was decoded for the gone client
