"""WebSocket text streaming: audio of the first sentence arrives while the client is still sending text,
and every sentence's audio comes in the order it was sent.

Real server on loopback, watermark off so that each sentence's samples can be found in the stream: every
segment uses the same voice and seed, so a sentence sounds as it does when asked alone (to one 16-bit step:
segments batched together round differently, see docs/http/streaming.md).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import numpy as np
import websockets

from tests.server.conftest import running_server

PIECES = ["Hello there. How are", " you today? I am", " fine. Good", "bye now."]
SENTENCES = ["Hello there.", "How are you today?", "I am fine.", "Goodbye now."]
OPTIONS = {"voice": "sage", "response_format": "pcm", "seed": 2, "max_new_tokens": 40}


async def _converse(ws_url: str) -> tuple[bytes, bytes, dict[str, object]]:
    """(audio received before `end` was sent, all audio, the final message)."""
    async with websockets.connect(ws_url) as ws:
        await ws.send(json.dumps({"type": "config", **OPTIONS}))
        await ws.send(json.dumps({"type": "text", "text": PIECES[0]}))  # completes the first sentence only
        early = await asyncio.wait_for(ws.recv(), timeout=120)  # a server that waits for `end` fails here
        assert isinstance(early, bytes), early
        for piece in PIECES[1:]:
            await ws.send(json.dumps({"type": "text", "text": piece}))
        await ws.send(json.dumps({"type": "end"}))
        audio = bytearray(early)
        while isinstance(message := await ws.recv(), bytes):
            audio += message
        return early, bytes(audio), json.loads(message)


def _locate(haystack: bytes, needle: bytes) -> tuple[int, int]:
    """Where 16-bit PCM ``needle`` best matches inside ``haystack``: (sample offset, largest difference there)."""
    big = np.frombuffer(haystack, np.int16).astype(np.int32)
    small = np.frombuffer(needle, np.int16).astype(np.int32)
    windows = np.lib.stride_tricks.sliding_window_view(big, small.size)  # (positions, len(small))
    errors = np.abs(windows - small).max(axis=1)
    best = int(errors.argmin())
    return best, int(errors[best])


def test_first_audio_before_end_and_sentences_in_order(tmp_path: Path) -> None:
    with running_server(tmp_path, watermark=False, cache_max_bytes=0) as (url, _):
        early, audio, done = asyncio.run(_converse(url.replace("http://", "ws://") + "/v1/audio/speech/ws"))
        alone = [
            httpx.post(f"{url}/v1/audio/speech", json={"input": sentence, **OPTIONS}, timeout=300).content
            for sentence in SENTENCES
        ]
    assert done["type"] == "done", done
    assert len(early) > 0  # the first sentence was heard before the text stream ended
    positions = []
    for sentence, pcm in zip(SENTENCES, alone, strict=True):
        middle = len(pcm) // 4 * 2
        snippet = pcm[middle - 1024 : middle + 1024]  # away from the crossfades at segment joins
        assert len(snippet) == 2048, f"{sentence!r} made too little audio to place"
        position, max_step = _locate(audio, snippet)
        assert max_step <= 1, f"the audio of {sentence!r} is not in the stream (closest: {max_step} steps off)"
        positions.append(position)
    assert positions == sorted(positions) and len(set(positions)) == len(SENTENCES)
    assert abs(len(audio) - sum(len(p) for p in alone)) < 2 * 512 * len(SENTENCES)  # nothing extra, nothing lost
