"""The WebSocket on par with HTTP, through a real server: SSML through the one segmenter, captions at exact
sample counts, vLLM-Omni's message names with several utterances per connection, and the same ``usage``.

Watermark and cache off and one segment in flight, so the same seeded request makes the same samples on either
transport (segments batched together round differently; see docs/http/streaming.md).
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tests.server.conftest import MAX_NEW_TOKENS, running_server
from tests.server.test_captions_http import samples_of, sse_events
from tests.server.ws_util import check_captions_against_audio, ws_session

OPTIONS = {"voice": "nova", "seed": 7, "max_new_tokens": MAX_NEW_TOKENS, "response_format": "pcm"}
SSML = '<?xml version="1.0"?><speak>One two three.<break time="500ms"/>Four five six.</speak>'
SSML_PLAIN = '<speak>One two three.<break time="500ms"/>Four five six.</speak>'
HALF_SECOND = 12000


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(HTTP base URL, WebSocket URL) of a server that cuts every sentence into its own segment."""
    with running_server(
        tmp_path_factory.mktemp("ws_parity"), watermark=False, cache_max_bytes=0, max_segments_in_flight=1,
        max_segment_chars=20,
    ) as (url, _):  # fmt: skip
        yield url, url.replace("http://", "ws://") + "/v1/audio/speech/ws"


def http_pcm(base_url: str, text: str, **extra: Any) -> bytes:
    response = httpx.post(f"{base_url}/v1/audio/speech", json={"input": text, **OPTIONS, **extra}, timeout=120)
    assert response.status_code == 200, response.text
    return response.content


def test_ssml_over_the_websocket_makes_the_samples_http_makes(urls: tuple[str, str]) -> None:
    base_url, ws_url = urls
    expected = http_pcm(base_url, SSML_PLAIN)
    session = ws_session(ws_url, [{"type": "config", **OPTIONS}, {"type": "text", "text": SSML_PLAIN}, {"type": "end"}])
    assert session.errors == [] and session.close_code == 1000
    assert [u.done is not None for u in session.utterances] == [True]
    assert bytes(session.utterances[0].audio) == expected  # every sample: the break included, no markup spoken
    # the XML declaration is SSML too, and so is any text with input_format="ssml"
    declared = ws_session(ws_url, [{"type": "session.config", **OPTIONS}, {"type": "input.text", "text": SSML},
                                   {"type": "session.close"}])  # fmt: skip
    assert bytes(declared.utterances[0].audio) == http_pcm(base_url, SSML)
    assert longest_silence(expected) == HALF_SECOND
    # read as plain text (input_format="text"), the same document has no break
    as_text = ws_session(ws_url, [{"type": "config", **OPTIONS, "input_format": "text"},
                                  {"type": "text", "text": SSML_PLAIN}, {"type": "end"}])  # fmt: skip
    assert as_text.close_code == 1000 and longest_silence(bytes(as_text.utterances[0].audio)) < HALF_SECOND // 10


def longest_silence(pcm: bytes) -> int:
    """The longest run of zero samples in 16-bit PCM."""
    zero = np.concatenate([[0], (np.frombuffer(pcm, "<i2") == 0).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(zero))  # run starts and ends, alternating
    return int((edges[1::2] - edges[::2]).max(initial=0))


def test_caption_messages_match_the_audio_samples_received(urls: tuple[str, str]) -> None:
    _, ws_url = urls
    pieces = ["I have 3 cats. They sl", "eep all day. ", SSML_PLAIN, "Dogs bark."]
    script = [{"type": "config", **OPTIONS, "captions": True}, *({"type": "text", "text": p} for p in pieces)]
    session = ws_session(ws_url, [*script, {"type": "end"}])
    assert session.errors == [] and session.close_code == 1000
    (utterance,) = session.utterances
    captions = utterance.captions
    assert [c["text"] for c in captions] == [
        "I have three cats.", "They sleep all day.", "One two three.", "Four five six.", "Dogs bark.",
    ]  # fmt: skip
    assert all(c["utterance"] == 0 for c in captions) and [c["index"] for c in captions] == list(range(5))
    check_captions_against_audio(utterance)
    assert samples_of(captions[0]["start"]) == 0
    for before, after in itertools.pairwise(captions):
        gap = samples_of(after["start"]) - samples_of(before["end"])
        assert gap == (HALF_SECOND if before["text"] == "One two three." else 0)  # the break, exactly
    pcm = bytes(utterance.audio)
    silence = pcm[2 * samples_of(captions[2]["end"]) : 2 * samples_of(captions[3]["start"])]
    assert len(silence) == 2 * HALF_SECOND and not any(silence)
    # no captions unless asked for
    quiet = ws_session(ws_url, [{"type": "config", **OPTIONS}, *script[1:], {"type": "end"}])
    assert quiet.utterances[0].captions == [] and bytes(quiet.utterances[0].audio) == pcm


def test_vllm_omni_names_give_two_utterances_on_one_connection(urls: tuple[str, str]) -> None:
    base_url, ws_url = urls
    script = [
        {"type": "session.config", **OPTIONS, "captions": True},
        {"type": "input.text", "text": "Hello there."},
        {"type": "input.done"},
        {"type": "input.text", "text": "Good"},
        {"type": "input.text", "text": "bye now."},
        {"type": "input.done"},
        {"type": "session.close"},
    ]
    session = ws_session(ws_url, script)
    assert session.errors == [] and session.close_code == 1000
    first, second = session.utterances  # session.close right after input.done adds no empty utterance
    assert first.done is not None and second.done is not None
    assert (first.done["utterance"], second.done["utterance"]) == (0, 1)
    assert bytes(first.audio) == http_pcm(base_url, "Hello there.")
    assert bytes(second.audio) == http_pcm(base_url, "Goodbye now.")  # a fresh utterance, not a continuation
    assert [c["text"] for c in second.captions] == ["Goodbye now."] and second.captions[0]["utterance"] == 1
    check_captions_against_audio(first)
    check_captions_against_audio(second)


def test_todays_names_still_work_and_mix(urls: tuple[str, str]) -> None:
    base_url, ws_url = urls
    old = ws_session(ws_url, [{"type": "config", **OPTIONS}, {"type": "text", "text": "Hello there."}, {"type": "end"}])
    assert old.close_code == 1000 and len(old.utterances) == 1
    assert bytes(old.utterances[0].audio) == http_pcm(base_url, "Hello there.")
    empty = ws_session(ws_url, [{"type": "config", **OPTIONS}, {"type": "end"}])
    assert [u.done["usage"]["total_tokens"] for u in empty.utterances if u.done] == [0]
    mixed = ws_session(ws_url, [{"type": "config", **OPTIONS}, {"type": "text", "text": "One."}, {"type": "input.done"},
                                {"type": "input.text", "text": "Two."}, {"type": "end"}])  # fmt: skip
    assert mixed.close_code == 1000 and [u.done["utterance"] for u in mixed.utterances if u.done] == [0, 1]


def test_a_second_config_is_refused(urls: tuple[str, str]) -> None:
    _, ws_url = urls
    session = ws_session(ws_url, [{"type": "config", **OPTIONS}, {"type": "text", "text": "One."},
                                  {"type": "input.done"}, {"type": "session.config", **OPTIONS}])  # fmt: skip
    assert session.close_code == 1008
    assert "sent once" in session.errors[0]["error"]["message"]


def test_usage_is_the_same_object_on_every_transport(urls: tuple[str, str]) -> None:
    base_url, ws_url = urls
    text = "I have 3 cats. They sleep all day."
    with httpx.Client(base_url=base_url, timeout=120) as http:
        sse_done = sse_events(http, {"input": text, **OPTIONS})[-1]
        captioned = http.post("/v1/audio/speech/captioned", json={"input": text, **OPTIONS})
        streamed = http.post("/v1/audio/speech/captioned", json={"input": text, **OPTIONS, "stream": True})
    assert sse_done["type"] == "speech.audio.done"
    ndjson_done = [line for line in streamed.text.splitlines() if '"speech.audio.done"' in line]
    session = ws_session(ws_url, [{"type": "config", **OPTIONS}, {"type": "text", "text": text}, {"type": "end"}])
    usage = sse_done["usage"]
    assert set(usage) == {"input_tokens", "output_tokens", "total_tokens"}
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert captioned.json()["usage"] == usage
    assert len(ndjson_done) == 1 and httpx.Response(200, content=ndjson_done[0]).json()["usage"] == usage
    assert session.utterances[0].done is not None and session.utterances[0].done["usage"] == usage
    assert base64.b64decode(captioned.json()["audio"]) == bytes(session.utterances[0].audio)


def test_ssml_voices_over_the_websocket_as_over_http(urls: tuple[str, str]) -> None:
    """``<voice>`` goes through the same service path: the same samples, and the captions name each voice."""
    base_url, ws_url = urls
    dialogue = '<speak><voice name="echo">One two three.</voice><voice name="onyx">Four five six.</voice></speak>'
    expected = http_pcm(base_url, dialogue)
    session = ws_session(ws_url, [{"type": "config", **OPTIONS, "captions": True}, {"type": "text", "text": dialogue},
                                  {"type": "end"}])  # fmt: skip
    assert session.errors == [] and session.close_code == 1000
    (utterance,) = session.utterances
    assert bytes(utterance.audio) == expected
    assert bytes(utterance.audio) != http_pcm(base_url, "<speak>One two three. Four five six.</speak>")
    assert [c.get("voice") for c in utterance.captions] == ["echo", "onyx"]
    check_captions_against_audio(utterance)
