"""A client that goes away mid-stream frees its engine sequence and KV slot within a few steps.

Real HTTP on loopback; the engine's state is read from /metrics, as an operator would.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from tests.server.conftest import running_server
from tests.server.guards_util import metric

LONG = {"input": "A long answer that the listener abandons after the first words. " * 4, "seed": 9,
        "max_new_tokens": 1500, "response_format": "pcm"}  # fmt: skip


def _engine(url: str) -> tuple[float, float, float]:
    """(running sequences, free KV slots, steps so far)."""
    names = ("turbotts_running_sequences", "turbotts_free_kv_slots", "turbotts_engine_steps")
    running, free, steps = (metric(url, name) for name in names)
    return running, free, steps


def test_closing_a_stream_after_its_first_chunk_aborts_the_engine_request(tmp_path: Path) -> None:
    with running_server(tmp_path, max_new_tokens=1500, cache_max_bytes=0) as (url, _):
        _, idle_free_slots, _ = _engine(url)
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps(LONG).encode()
        sock = socket.create_connection((host, int(port)))
        sock.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        running, free, steps_at_close = _engine(url)
        assert running == 1  # the request is being decoded
        sock.close()
        closed_at = time.monotonic()
        deadline = time.monotonic() + 60
        while (state := _engine(url))[0] != 0:
            assert time.monotonic() < deadline, f"the engine request was never aborted: {state}"
            time.sleep(0.01)
        running, free, steps_at_abort = state
        abort_ms = 1000 * (time.monotonic() - closed_at)  # includes the /metrics polls
        time.sleep(0.5)
        *_, steps_later = _engine(url)
    num_steps = steps_at_abort - steps_at_close
    print(f"\nclose to abort: {num_steps:.0f} steps (of up to {LONG['max_new_tokens']}), seen in {abort_ms:.0f} ms")
    assert free == idle_free_slots  # the KV slot came back
    assert steps_later == steps_at_abort  # nothing more was decoded for the gone client
    # asked for 1500 frames, stopped within a few: measured 1-44 steps of the tiny model (≈1 ms each), while the
    # /metrics polls that observe it take tens of ms; a real model's step is 25-100 ms
    assert num_steps < 100
