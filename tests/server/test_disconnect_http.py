"""A client that goes away mid-stream frees its engine sequence and KV slot within a few steps.

Real HTTP on loopback; the engine's state is read from /metrics, as an operator would.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from starlette.types import Message

from tests.server.conftest import running_server
from tests.server.guards_util import SPEECH, metric
from turbotts.server.web.responses import ClosingStreamingResponse

# One segment that the tiny dummy model (fp32) speaks for hundreds of code frames before it stops by itself
# (seed 2: 624 frames here): long enough that an abort (a few steps) and a run to its natural end cannot be
# mistaken. Float sums differ between CPUs, so the seed is checked on this machine and the next one tried.
LONG = {"input": "A listener who goes away.", "max_new_tokens": 1500, "response_format": "pcm"}
SEEDS = (2, 3, 5, 7, 11, 13)
MIN_FULL_STEPS = 400  # shorter, and a request that is never aborted could still end within the bound


def _engine(url: str) -> tuple[float, float, float]:
    """(running sequences, free KV slots, steps so far)."""
    names = ("turbotts_running_sequences", "turbotts_free_kv_slots", "turbotts_engine_steps")
    running, free, steps = (metric(url, name) for name in names)
    return running, free, steps


def _full_run_steps(url: str, body: dict[str, object]) -> float:
    """Engine steps of ``body`` heard to the end: the baseline an aborted request must stay far below."""
    *_, steps_before = _engine(url)
    response = httpx.post(f"{url}{SPEECH}", json=body, timeout=120)
    assert response.status_code == 200, response.text
    *_, steps_after = _engine(url)
    return steps_after - steps_before


def _long_request(url: str) -> tuple[dict[str, object], float]:
    """The first seed whose request runs at least MIN_FULL_STEPS on this machine, and its step count."""
    runs = []
    for seed in SEEDS:
        body = {**LONG, "seed": seed}
        runs.append(num_steps := _full_run_steps(url, body))
        if num_steps >= MIN_FULL_STEPS:
            return body, num_steps
    raise AssertionError(f"seeds {SEEDS} end by themselves after {runs} steps: an abort could not be told apart")


def test_closing_a_stream_after_its_first_chunk_aborts_the_engine_request(tmp_path: Path) -> None:
    with running_server(tmp_path, max_new_tokens=1500, cache_max_bytes=0) as (url, _):
        long_body, num_full_steps = _long_request(url)
        max_steps_after_close = num_full_steps // 4
        _, idle_free_slots, steps_at_start = _engine(url)
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps(long_body).encode()
        sock = socket.create_connection((host, int(port)))
        sock.sendall(f"POST {SPEECH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        running, free, steps_at_close = _engine(url)
        assert running == 1  # the request is being decoded
        sock.close()
        num_steps_before_close = steps_at_close - steps_at_start
        deadline = time.monotonic() + 120  # a hang guard only: the bound below is in steps
        while (state := _engine(url))[0] != 0:
            num_steps = state[2] - steps_at_close
            assert num_steps <= max_steps_after_close, (
                f"still decoding {num_steps:.0f} steps after the client left (a full run is {num_full_steps:.0f}): "
                "the engine request was not aborted"
            )
            assert time.monotonic() < deadline, f"the engine request was never aborted: {state}"
            time.sleep(0.01)
        running, free, steps_at_abort = state
        time.sleep(0.5)
        *_, steps_later = _engine(url)
    num_steps = steps_at_abort - steps_at_close
    print(f"\nclose to abort: {num_steps:.0f} steps after {num_steps_before_close:.0f}; heard to the end: "
          f"{num_full_steps:.0f} steps")  # fmt: skip
    # the client left in the first half, so a request left running would decode more than a quarter after it
    assert num_steps_before_close < num_full_steps // 2
    assert num_steps < max_steps_after_close  # measured 2-3 steps on a loaded 2-core machine
    assert free == idle_free_slots  # the KV slot came back
    assert steps_later == steps_at_abort  # nothing more was decoded for the gone client


def test_a_stream_the_client_left_closes_its_body_at_once_even_while_it_is_still_referenced() -> None:
    """The response closes its body when the client goes away, not when the body is garbage collected.

    Over HTTP the abandoned body is usually collected at once (nothing else holds it), which hides a response
    that never closes it; here the caller keeps a reference, as a wrapping layer or a traceback may, and the
    client leaves while the first chunk is being sent, so the body waits at a ``yield``, not inside the engine.
    """

    async def main() -> list[str]:
        events: list[str] = []  # what happened to the body by the time the response ended

        async def body() -> AsyncIterator[bytes]:
            try:
                while True:
                    yield b"audio"
            finally:
                events.append("closed")  # where the pipeline cancels its segments and aborts the engine

        gone = asyncio.Event()

        async def receive() -> Message:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.body":
                gone.set()  # the client leaves while its first chunk is on the way
                await asyncio.Event().wait()  # a send that never completes: only the disconnect ends it

        stream = body()  # still referenced after the response ends
        scope = {"type": "http", "asgi": {"spec_version": "2.3"}, "method": "POST", "path": SPEECH, "headers": []}
        await ClosingStreamingResponse(stream, media_type="audio/pcm")(scope, receive, send)
        return list(events)

    assert asyncio.run(main()) == ["closed"], "the response ended with its body open: nothing aborts the engine"
