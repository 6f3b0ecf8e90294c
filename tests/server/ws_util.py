"""A WebSocket session for the parity tests: send a script, read every reply until the server closes."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import websockets

from tests.server.test_captions_http import samples_of


@dataclass
class Utterance:
    """What the server sent for one utterance: its audio, its caption messages and its ``done`` message."""

    audio: bytearray = field(default_factory=bytearray)
    captions: list[dict[str, Any]] = field(default_factory=list)
    num_samples_at_caption: list[int] = field(default_factory=list)  # audio received when each caption came
    done: dict[str, Any] | None = None


@dataclass
class Session:
    utterances: list[Utterance]
    errors: list[dict[str, Any]]
    close_code: int | None
    close_reason: str


async def _session(url: str, script: list[dict[str, Any]]) -> Session:
    utterances, errors = [Utterance()], []
    async with websockets.connect(url, max_size=None, open_timeout=30, close_timeout=10) as ws:
        for message in script:
            await ws.send(json.dumps(message))
        try:
            while True:
                reply = await ws.recv()
                current = utterances[-1]
                if isinstance(reply, bytes):
                    current.audio += reply
                    continue
                event = json.loads(reply)
                if event["type"] == "speech.audio.segment":
                    current.captions.append(event)
                    current.num_samples_at_caption.append(len(current.audio) // 2)
                elif event["type"] == "done":
                    current.done = event
                    utterances.append(Utterance())
                else:
                    errors.append(event)
        except websockets.ConnectionClosed:
            pass
        if utterances[-1].done is None and not utterances[-1].audio:
            utterances.pop()  # nothing came after the last done
        return Session(utterances, errors, ws.close_code, ws.close_reason or "")


def ws_session(url: str, script: list[dict[str, Any]], timeout_s: float = 120) -> Session:
    return asyncio.run(asyncio.wait_for(_session(url, script), timeout_s))


def check_captions_against_audio(utterance: Utterance) -> None:
    """Each caption came once its audio had arrived, and the captions tile the utterance's audio exactly."""
    for caption, num_received in zip(utterance.captions, utterance.num_samples_at_caption, strict=True):
        assert samples_of(caption["end"]) <= num_received, caption
    assert samples_of(utterance.captions[-1]["end"]) == len(utterance.audio) // 2
