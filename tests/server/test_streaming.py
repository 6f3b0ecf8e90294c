"""Concurrency, long text, WebSocket text streaming and graceful shutdown, over real sockets."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import websockets
from openai import AsyncOpenAI

from tests.server.audio import decode
from tests.server.conftest import MAX_NEW_TOKENS, running_server
from turbotts.text.segment import SentenceBuffer

SPEECH = "/v1/audio/speech"


def test_eight_concurrent_streams_all_complete(server_url: str) -> None:
    async def one(client: AsyncOpenAI, index: int) -> bytes:
        async with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="shimmer", input=f"Request number {index}. It streams.", response_format="wav",
            extra_body={"max_new_tokens": MAX_NEW_TOKENS},
        ) as response:  # fmt: skip
            return b"".join([chunk async for chunk in response.iter_bytes()])

    async def main() -> list[bytes]:
        async with AsyncOpenAI(base_url=f"{server_url}/v1", api_key="x", timeout=120, max_retries=0) as client:
            return await asyncio.gather(*(one(client, i) for i in range(8)))

    for body in asyncio.run(main()):
        rate, samples = decode(body, "wav")
        assert rate == 24000 and samples.size > 0 and np.isfinite(samples).all()


def test_long_text_is_segmented_and_joined(http: httpx.Client) -> None:
    sentence = "This sentence is one segment of a much longer text. "
    text = sentence * 12  # ~620 characters: several segments of at most 120
    response = http.post(SPEECH, json={"input": text, "response_format": "pcm", "seed": 1, "max_new_tokens": 4})
    assert response.status_code == 200
    short = http.post(SPEECH, json={"input": sentence, "response_format": "pcm", "seed": 1, "max_new_tokens": 4})
    # each segment adds audio: the long text is several times longer than one sentence
    assert len(response.content) > 3 * len(short.content)


def test_sentence_buffer_cuts_at_sentence_ends_only() -> None:
    buffer = SentenceBuffer(max_chars=40)
    assert buffer.push("Pi is 3.") == []
    assert buffer.push("14 today") == []
    assert buffer.push(". Next one") == ["Pi is 3.14 today."]
    assert buffer.push("。中文") == [" Next one。"]
    assert buffer.push(" " + "word " * 12) != []  # too long without an end: cut at a word
    assert "".join(buffer.flush()).strip().startswith("word")


def test_websocket_streams_audio_in_order_for_incremental_text(server_url: str) -> None:
    ws_url = server_url.replace("http://", "ws://") + "/v1/audio/speech/ws"

    async def main() -> tuple[bytes, dict[str, object]]:
        async with websockets.connect(ws_url) as ws:
            await ws.send(json.dumps({"type": "config", "voice": "sage", "response_format": "pcm", "seed": 2,
                                      "max_new_tokens": MAX_NEW_TOKENS}))  # fmt: skip
            for piece in ["Hello th", "ere. How are", " you today? I am", " fine", ". Bye"]:
                await ws.send(json.dumps({"type": "text", "text": piece}))
            await ws.send(json.dumps({"type": "end"}))
            audio = bytearray()
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    audio += message
                    continue
                return bytes(audio), json.loads(message)

    audio, done = asyncio.run(main())
    assert done["type"] == "done", done
    usage = done["usage"]
    assert isinstance(usage, dict) and usage["output_tokens"] > 0
    assert len(audio) > 0 and len(audio) % 2 == 0


def test_websocket_errors_are_json(server_url: str) -> None:
    ws_url = server_url.replace("http://", "ws://") + "/v1/audio/speech/ws"

    async def first_reply(messages: list[dict[str, object]]) -> dict[str, object]:
        async with websockets.connect(ws_url) as ws:
            for message in messages:
                await ws.send(json.dumps(message))
            reply = json.loads(await ws.recv())
            assert isinstance(reply, dict)
            return reply

    bad_first = asyncio.run(first_reply([{"type": "text", "text": "hi"}]))
    assert bad_first["type"] == "error" and "message" in bad_first["error"]  # type: ignore[operator]
    unknown_voice = asyncio.run(first_reply([{"type": "config", "voice": "nobody"}]))
    assert unknown_voice["error"]["code"] == "voice_not_found"  # type: ignore[index]


def test_shutdown_finishes_in_flight_requests(tmp_path: Path) -> None:
    with running_server(tmp_path, max_new_tokens=200) as (url, server):
        result: dict[str, object] = {}

        def long_request() -> None:
            body = {"input": "A long request. " * 20, "response_format": "wav", "max_new_tokens": 200, "seed": 1}
            with httpx.Client(timeout=120) as client:
                response = client.post(f"{url}{SPEECH}", json=body)
                result["status"], result["body"] = response.status_code, response.content

        thread = threading.Thread(target=long_request)
        thread.start()
        time.sleep(1.0)  # the request is streaming now
        server.should_exit = True  # what SIGTERM does
        time.sleep(0.3)
        with pytest.raises(httpx.TransportError):  # no new connections once shutdown began
            httpx.get(f"{url}/healthz", timeout=2)
        thread.join(120)
    assert result["status"] == 200
    rate, samples = decode(result["body"], "wav")  # type: ignore[arg-type]
    assert rate == 24000 and samples.size > 0
