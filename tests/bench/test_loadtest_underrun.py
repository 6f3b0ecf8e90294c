"""Stall detection end to end: ``turbotts loadtest`` against a tiny server whose stream timing the test controls.

The server (starlette on loopback) answers every request with 1 s of real audio, waits,
then sends 1 s more. Waiting 1.5 s leaves a listener that started at the first chunk
without audio for 0.5 s: exactly one stall of about 500 ms. Waiting 0.5 s leaves it
half a second of audio in hand: a gap on the wire, but no stall. The only timing
assumed is the one the server defines, with loopback jitter as the tolerance.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route
from typer.testing import CliRunner

from turbotts.cli import app
from turbotts.server.audio.encoding import StreamEncoder

CHUNK_S = 1.0
STALL_TOLERANCE_S = (0.4, 0.85)  # around 0.5 s: loopback and scheduling jitter on a loaded CI machine


def _tone(seconds: float) -> np.ndarray:
    return (0.3 * np.sin(np.arange(int(seconds * 24000)) * 0.05)).astype(np.float32)


def timed_app(wait_s: float) -> Starlette:
    """A speech endpoint that sends CHUNK_S of audio, waits ``wait_s``, then sends CHUNK_S more."""

    async def speech(request: Request) -> StreamingResponse:
        body = await request.json()
        fmt, is_sse = body["response_format"], body.get("stream_format") == "sse"

        async def parts() -> AsyncIterator[bytes]:
            encoder = StreamEncoder(fmt)
            for index in range(2):
                data = encoder.encode(_tone(CHUNK_S)) + (encoder.finish() if index == 1 else b"")
                if is_sse:
                    event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
                    data = f"data: {json.dumps(event)}\n\n".encode()
                yield data
                if index == 0:
                    await asyncio.sleep(wait_s)
            if is_sse:
                yield b'data: {"type": "speech.audio.done", "usage": {}}\n\n'

        return StreamingResponse(parts(), media_type="text/event-stream" if is_sse else "audio/pcm")

    return Starlette(routes=[Route("/v1/audio/speech", speech, methods=["POST"])])


@contextmanager
def serving(application: Starlette) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(application, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture(scope="module")
def paused_url() -> Iterator[str]:
    with serving(timed_app(wait_s=CHUNK_S + 0.5)) as url:
        yield url


@pytest.fixture(scope="module")
def steady_url() -> Iterator[str]:
    with serving(timed_app(wait_s=CHUNK_S - 0.5)) as url:
        yield url


def loadtest(tmp_path: Path, url: str, *args: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(app, ["loadtest", url, "--concurrency", "1", "--num-requests", "1",
                                      "--json", str(out), *args])  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


@pytest.mark.parametrize(("fmt", "stream_format"), [("pcm", "audio"), ("wav", "audio"), ("pcm", "sse"),
                                                    ("mp3", "audio")])  # fmt: skip
def test_a_500_ms_pause_beyond_the_buffer_is_one_500_ms_stall(
    tmp_path: Path, paused_url: str, fmt: str, stream_format: str
) -> None:
    report = loadtest(tmp_path, paused_url, "--format", fmt, "--stream-format", stream_format)
    assert report["status_counts"] == {"200": 1} and report["num_ok"] == 1, report["error_counts"]
    assert report["audio_s"] == pytest.approx(2 * CHUNK_S, abs=0.1)  # decoded: mp3 adds codec padding
    assert report["num_stalls"] == 1
    assert STALL_TOLERANCE_S[0] <= report["stall_s"]["max"] <= STALL_TOLERANCE_S[1]
    assert report["stall_s"]["total"] == pytest.approx(report["stall_s"]["max"])
    assert report["continuity_rate"] == 0.0 and report["goodput_rps"] == 0.0
    (request,) = report["runs"][0]["requests"]
    assert request["max_stall_s"] == report["stall_s"]["max"]


@pytest.mark.parametrize(("fmt", "stream_format"), [("pcm", "audio"), ("wav", "sse"), ("mp3", "audio")])
def test_a_pause_the_buffer_covers_is_no_stall(tmp_path: Path, steady_url: str, fmt: str, stream_format: str) -> None:
    report = loadtest(tmp_path, steady_url, "--format", fmt, "--stream-format", stream_format)
    assert report["num_ok"] == 1, report["error_counts"]
    assert report["num_stalls"] == 0
    assert report["stall_s"]["total"] == 0.0 and report["stall_s"]["max"] == 0.0
    assert report["continuity_rate"] == 1.0
    assert report["goodput_rps"] > 0  # TTFA is well under the 1 s default SLO


def test_a_startup_buffer_of_both_chunks_hides_the_pause(tmp_path: Path, paused_url: str) -> None:
    """With --prebuffer-ms 1500 the player waits for the second chunk: no stall, at the price of a later start."""
    report = loadtest(tmp_path, paused_url, "--format", "pcm", "--prebuffer-ms", "1500")
    assert report["num_stalls"] == 0 and report["continuity_rate"] == 1.0
    assert report["ttfa_s"]["p50"] < 0.5 * CHUNK_S  # TTFA is still the first audio, not the start of playback
