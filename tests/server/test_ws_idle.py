"""The WebSocket idle timeout through a real server: a silent client is closed with code 4008 and an error
message; a client that keeps talking, or that is between utterances for less than the timeout, is not.

The server's timeout is tiny (``IDLE_S``); the only timing assertion is that nothing closes sooner than it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets

from tests.server.conftest import MAX_NEW_TOKENS, running_server
from tests.server.ws_util import ws_session

IDLE_S = 0.5
CROSSFADE_BYTES = 2 * 480  # 20 ms of 16-bit pcm, held back at the end of a stream that has not ended
CONFIG = {"type": "config", "voice": "nova", "seed": 3, "max_new_tokens": MAX_NEW_TOKENS, "response_format": "pcm"}


@pytest.fixture(scope="module")
def ws_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(tmp_path_factory.mktemp("ws_idle"), ws_idle_timeout_s=IDLE_S) as (url, _):
        yield url.replace("http://", "ws://") + "/v1/audio/speech/ws"


async def _silent_after(url: str, script: list[dict[str, object]]) -> tuple[list[object], int | None, str, float]:
    """Send ``script``, then nothing: (replies, close code, close reason, seconds from the last send to the close)."""
    replies: list[object] = []
    async with websockets.connect(url, open_timeout=30, close_timeout=10) as ws:
        for message in script:
            await ws.send(json.dumps(message))
        sent_s = time.monotonic()
        try:
            while True:
                reply = await asyncio.wait_for(ws.recv(), 60)
                replies.append(reply if isinstance(reply, bytes) else json.loads(reply))
        except websockets.ConnectionClosed:
            pass
        return replies, ws.close_code, ws.close_reason or "", time.monotonic() - sent_s


@pytest.mark.parametrize("script", [[], [CONFIG], [CONFIG, {"type": "text", "text": "Hello"}]],
                         ids=["nothing", "config", "unfinished_text"])  # fmt: skip
def test_a_silent_client_is_closed_with_4008(ws_url: str, script: list[dict[str, object]]) -> None:
    replies, code, reason, elapsed_s = asyncio.run(_silent_after(ws_url, script))
    assert (code, reason) == (4008, "idle timeout")
    error = replies[-1]
    assert isinstance(error, dict) and error["type"] == "error" and error["error"]["code"] == "idle_timeout"
    assert elapsed_s >= IDLE_S * 0.9  # not sooner than the setting (loose for clock granularity)


def test_between_utterances_the_clock_runs_again(ws_url: str) -> None:
    script = [CONFIG, {"type": "input.text", "text": "Hello there."}, {"type": "input.done"}]
    replies, code, _, _ = asyncio.run(_silent_after(ws_url, script))
    done = [r for r in replies if isinstance(r, dict) and r["type"] == "done"]
    assert len(done) == 1 and code == 4008  # the utterance was answered in full, then the silence closed it
    assert any(isinstance(r, bytes) for r in replies)


async def _talkative(url: str, num_pieces: int) -> tuple[int, int | None]:
    """Pieces each half a timeout apart (several timeouts in all), then end: (done messages, close code)."""
    num_done = 0
    async with websockets.connect(url, open_timeout=30, close_timeout=10) as ws:
        await ws.send(json.dumps(CONFIG))
        for n in range(num_pieces):
            await asyncio.sleep(IDLE_S / 2)
            await ws.send(json.dumps({"type": "text", "text": f"Word {n}"}))
        await ws.send(json.dumps({"type": "end"}))
        try:
            while True:
                reply = await asyncio.wait_for(ws.recv(), 60)
                num_done += isinstance(reply, str) and json.loads(reply)["type"] == "done"
        except websockets.ConnectionClosed:
            pass
        return num_done, ws.close_code


def test_a_client_that_keeps_sending_is_not_idle(ws_url: str) -> None:
    num_done, code = asyncio.run(_talkative(ws_url, num_pieces=6))  # 1.5 s of sending: three timeouts
    assert (num_done, code) == (1, 1000)
    assert ws_session(ws_url, [CONFIG, {"type": "text", "text": "Still fine."}, {"type": "end"}]).close_code == 1000


async def _timed(url: str, pieces: list[str], *, send_end: bool) -> tuple[int, float, float, float, int | None]:
    """Pieces, then ``end`` or nothing: (audio bytes, seconds from the last message to the last frame, largest gap
    between frames, seconds from the last frame to the close, close code)."""
    num_bytes, gaps = 0, [0.0]
    async with websockets.connect(url, open_timeout=30, close_timeout=10) as ws:
        await ws.send(json.dumps(CONFIG))
        for piece in pieces:
            await ws.send(json.dumps({"type": "text", "text": piece}))
        if send_end:
            await ws.send(json.dumps({"type": "end"}))
        sent_s = last_s = time.monotonic()
        try:
            while True:
                reply = await asyncio.wait_for(ws.recv(), 120)
                if isinstance(reply, bytes):
                    now_s = time.monotonic()
                    gaps.append(now_s - last_s)
                    num_bytes, last_s = num_bytes + len(reply), now_s
        except websockets.ConnectionClosed:
            pass
        return num_bytes, last_s - sent_s, max(gaps), time.monotonic() - last_s, ws.close_code


def test_a_client_listening_to_a_long_answer_is_not_idle(ws_url: str, tmp_path: Path) -> None:
    """Calibrated on this machine: a timeout of three times the largest gap between audio frames (the first
    frame's wait included), and a text whose audio streams for more than two such timeouts. The clock runs
    while the server waits for more text and streams what it has; audio sent restarts it."""
    num_pieces = 8
    for _ in range(6):  # double the text until its audio streams long enough, compared with its frame gaps
        # each piece a whole sentence, released at once (". "); all different, as the server caches by seed
        pieces = [f"Sentence {n} is not in the cache. " for n in range(num_pieces)]
        num_bytes, duration_s, max_gap_s, _, code = asyncio.run(_timed(ws_url, pieces, send_end=True))
        assert code == 1000
        if duration_s > 6 * max_gap_s and duration_s > 0.3:
            break
        num_pieces *= 2
    idle_s = max(3 * max_gap_s, 0.1)
    assert duration_s > 2 * idle_s, (duration_s, max_gap_s)
    with running_server(tmp_path, ws_idle_timeout_s=idle_s) as (url, _):
        # the same text and no `end`: the answer streams, then the silence after it closes
        heard, _, _, close_after_s, code = asyncio.run(
            _timed(url.replace("http://", "ws://") + "/v1/audio/speech/ws", pieces, send_end=False)
        )
    assert code == 4008
    assert num_bytes - CROSSFADE_BYTES <= heard <= num_bytes  # all of it but the tail kept for a crossfade
    assert close_after_s >= 0.9 * idle_s  # idle counted from the last audio frame, not from the last message
