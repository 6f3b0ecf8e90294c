"""The server, ``turbotts say --captions`` and the Python API cut the same input into the same segments.

Each is read from what it outputs: the server's SSE caption events, the caption file ``say`` writes, and
the API's audio (``synthesize_long`` is the synthesis of the segmenter's segments). The captions show a
segment as spoken (the engine's text front end), so the segmenter's segments are compared in that form.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import webvtt

from tests.cli_runner import run_cli
from tests.server.conftest import MAX_NEW_TOKENS
from tests.server.test_captions_http import SEGMENT, body, sse_events
from turbotts.api import TTS
from turbotts.params import SamplingParams, SynthesisParams
from turbotts.server.audio.timeline import caption_text
from turbotts.sources import ModelSource
from turbotts.text.segmenter import split_input
from turbotts.text.utterances import Utterance

# about 240 characters with markup, an emoji and a number: three segments at the default 120, two sentences packed
TEXT = (
    "The first sentence is here and it has 12 words or so in it, more or less. "
    "The second sentence follows it closely and is <b>about</b> as long as the first one. "
    "A third one closes the text. 😀 And a fourth, short."
)
SSML = '<speak><s>Hello there.</s><break time="300ms"/><prosody rate="slow">See you soon. Bye.</prosody></speak>'


@pytest.fixture(scope="module")
def tts() -> Iterator[TTS]:
    yield TTS.load(ModelSource(load_format="dummy", dummy_size="tiny"), dtype="fp32", quant="none")


def segmenter_captions(tts: TTS, text: str) -> list[str]:
    """The segmenter's segments of ``text`` (default length), as their captions show them."""
    segments = [item.text for item in split_input(text) if isinstance(item, Utterance)]
    return [caption_text(tts.engine.spoken_text(segment, normalize_text=True)) for segment in segments]


def server_captions(http: httpx.Client, text: str) -> list[str]:
    return [event["text"] for event in sse_events(http, body(text)) if event["type"] == SEGMENT]


def say_captions(tmp_path: Path, text: str) -> list[str]:
    wav, cues = tmp_path / "out.wav", tmp_path / "out.vtt"
    result = run_cli("say", text, "-o", str(wav), "--captions", str(cues), "--load-format", "dummy",
                     "--max-new-tokens", str(MAX_NEW_TOKENS), "--seed", "3", "--skip-refine")  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [cue.text for cue in webvtt.read(str(cues))]


@pytest.mark.parametrize(("text", "num_segments"), [(TEXT, 3), (SSML, 2)], ids=["plain", "ssml"])
def test_server_and_say_captions_show_the_segmenters_segments(
    tts: TTS, http: httpx.Client, tmp_path: Path, text: str, num_segments: int
) -> None:
    expected = segmenter_captions(tts, text)
    assert len(expected) == num_segments  # packed and cut: another way of cutting would show
    assert server_captions(http, text) == expected
    assert say_captions(tmp_path, text) == expected


def test_the_api_synthesizes_the_segmenters_segments(tts: TTS) -> None:
    """With a voice, ``synthesize_long`` is the segments' audio end to end; other segments would sound different."""
    params = SynthesisParams(code=SamplingParams(max_new_tokens=MAX_NEW_TOKENS), seed=3, voice_seed=2,
                             refine_text=False)  # fmt: skip
    segments = [item.text for item in split_input(TEXT) if isinstance(item, Utterance)]
    expected = np.concatenate(tts.synthesize(segments, params))
    audio = tts.synthesize_long(TEXT, params)
    # one batch or two give the same codes; the float sums differ in the last bits
    assert audio.shape == expected.shape and np.allclose(audio, expected, atol=1e-5)
    other_cut = np.concatenate(tts.synthesize([TEXT[:70], TEXT[70:160], TEXT[160:]], params))
    assert other_cut.shape != expected.shape or not np.allclose(other_cut, expected, atol=1e-5)
