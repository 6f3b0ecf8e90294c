"""SSML as W3C writes it, over real HTTP: the XML declaration and namespaces, and ``<voice>`` dialogues.

Seeded requests on a server without the watermark, so the same request gives the same
samples and a dialogue's audio can be checked against each part synthesized alone.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tests.server.conftest import running_server
from tests.server.test_captions_http import CAPTIONED, SEGMENT, body, samples_of, sse_events
from tests.server.ws_util import ws_session

SPEECH = "/v1/audio/speech"
W3C_HEAD = (
    '\ufeff<?xml version="1.0" encoding="UTF-8"?>\n'
    '<speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis" xml:lang="en-US">'
)
PART_A, PART_B = "One two three.", "Four five six."
DIALOGUE = f'<speak><voice name="nova">{PART_A}</voice><voice name="onyx">{PART_B}</voice></speak>'


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with (
        running_server(tmp_path_factory.mktemp("ssml-w3c"), watermark=False) as (base_url, _),
        httpx.Client(base_url=base_url, timeout=120) as http,
    ):
        yield http


def pcm_of(http: httpx.Client, text: str, **extra: Any) -> np.ndarray:
    response = http.post(SPEECH, json=body(text, **extra))
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2")


def sse(http: httpx.Client, text: str, **extra: Any) -> tuple[list[dict[str, Any]], np.ndarray]:
    events = sse_events(http, body(text, **extra))
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    return [e for e in events if e["type"] == SEGMENT], np.frombuffer(pcm, dtype="<i2")


def test_the_xml_declaration_namespace_and_lang_are_not_read_aloud(client: httpx.Client) -> None:
    declared = W3C_HEAD + "<p>Hello there.</p><p>See you soon.</p></speak>"
    bare = "<speak><p>Hello there.</p><p>See you soon.</p></speak>"
    segments, pcm = sse(client, declared)
    assert [s["text"] for s in segments] == ["Hello there.", "See you soon."]
    assert np.array_equal(pcm, pcm_of(client, bare)) and pcm.size > 0  # the same samples, to the last one
    prefixed = '<?xml version="1.0"?><s:speak xmlns:s="http://www.w3.org/2001/10/synthesis"><s:p>Hello there.</s:p>'
    assert np.array_equal(pcm_of(client, prefixed + "<s:p>See you soon.</s:p></s:speak>"), pcm)
    # before this issue the declaration made it plain text: the markup's words were spoken, longer
    assert not np.array_equal(pcm_of(client, declared, input_format="text"), pcm)


@pytest.mark.parametrize(
    "document",
    [
        '<?xml version="1.0"?><!DOCTYPE speak [<!ENTITY x "boom">]><speak>&x;</speak>',
        '<?xml version="1.0"?>\n<!DOCTYPE speak SYSTEM "http://www.w3.org/TR/speech-synthesis11/synthesis.dtd">'
        "<speak>Hi.</speak>",
    ],
)
def test_a_dtd_or_entity_after_a_declaration_is_still_a_400(client: httpx.Client, document: str) -> None:
    response = client.post(SPEECH, json=body(document))  # recognized as SSML by the declaration alone
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_ssml" and "document type declarations and entities" in error["message"]
    assert "boom" not in error["message"]


def test_voices_speak_in_order_each_as_it_would_alone(client: httpx.Client) -> None:
    alone_a, alone_b = pcm_of(client, PART_A, voice="nova"), pcm_of(client, PART_B, voice="onyx")
    segments, pcm = sse(client, DIALOGUE, voice="alloy")
    assert np.array_equal(pcm, np.concatenate([alone_a, alone_b]))  # a voice change is a cut: no crossfade
    assert [(s["text"], s["voice"]) for s in segments] == [(PART_A, "nova"), (PART_B, "onyx")]
    assert [(samples_of(s["start"]), samples_of(s["end"])) for s in segments] == [
        (0, alone_a.size), (alone_a.size, pcm.size),
    ]  # fmt: skip
    one_voice = pcm_of(client, f"<speak><s>{PART_A}</s><s>{PART_B}</s></speak>", voice="nova")
    assert not np.array_equal(pcm[alone_a.size :], one_voice[-alone_b.size :])
    assert not np.array_equal(pcm, pcm_of(client, DIALOGUE.replace("onyx", "nova")))


def test_the_cache_keys_hold_each_segments_voice(client: httpx.Client) -> None:
    """The same text in two voices, both cached: each answer is its own voice's audio."""
    nova = pcm_of(client, f'<speak><voice name="nova">{PART_A}</voice></speak>')
    echo = pcm_of(client, f'<speak><voice name="echo">{PART_A}</voice></speak>')
    again = client.post(SPEECH, json=body(f'<speak><voice name="echo">{PART_A}</voice></speak>'))
    assert again.headers.get("x-cache") == "l1"
    assert np.array_equal(np.frombuffer(again.content, dtype="<i2"), echo)
    assert not np.array_equal(nova, echo)
    assert np.array_equal(echo, pcm_of(client, PART_A, voice="echo"))


def test_saved_voices_mixes_and_the_requests_own_voice_are_named_in_captions(client: httpx.Client) -> None:
    saved = client.post("/v1/voices", json={"name": "narrator-w3c", "seed": 77})
    assert saved.status_code in (200, 201), saved.text
    document = (
        f'<speak>{PART_A}<voice name="narrator-w3c">{PART_B}</voice>'
        '<voice name="alloy*0.5+echo*0.5">Seven eight.</voice></speak>'
    )
    segments, pcm = sse(client, document, voice="shimmer")
    assert [s["voice"] for s in segments] == ["shimmer", "narrator-w3c", "alloy*0.5+echo*0.5"]
    saved_alone = pcm_of(client, PART_B, voice="narrator-w3c")
    start = samples_of(segments[1]["start"])
    assert np.array_equal(pcm[start : start + saved_alone.size], saved_alone)
    with client.stream("POST", CAPTIONED, json=body(document, stream=True)) as response:
        assert response.status_code == 200
        events = [json.loads(line) for line in response.iter_lines() if line]
    assert [e["voice"] for e in events if e["type"] == SEGMENT] == ["nova", "narrator-w3c", "alloy*0.5+echo*0.5"]
    whole = client.post(CAPTIONED, json=body(document))  # one JSON object: the same voices
    assert whole.status_code == 200, whole.text
    assert [s["voice"] for s in whole.json()["segments"]] == ["nova", "narrator-w3c", "alloy*0.5+echo*0.5"]
    plain, _ = sse(client, f"<speak><s>{PART_A}</s></speak>")
    assert "voice" not in plain[0]  # no <voice> in the document: captions as before
    plain_whole = client.post(CAPTIONED, json=body(f"<speak><s>{PART_A}</s></speak>"))
    assert "voice" not in plain_whole.json()["segments"][0]


def test_an_unknown_voice_is_the_voice_fields_4xx_before_any_audio(client: httpx.Client) -> None:
    as_field = client.post(SPEECH, json=body(PART_A, voice="nobody-here"))
    assert 400 <= as_field.status_code < 500
    document = f'<speak>{PART_A}<voice name="nobody-here">{PART_B}</voice></speak>'
    with client.stream("POST", SPEECH, json={**body(document), "stream_format": "sse"}) as response:
        response.read()
        assert response.status_code == as_field.status_code
        assert response.headers["content-type"].startswith("application/json")
        assert response.json()["error"]["code"] == as_field.json()["error"]["code"]
    bad_string = client.post(SPEECH, json=body('<speak><voice name="not a voice string">Hi.</voice></speak>'))
    assert 400 <= bad_string.status_code < 500


def test_emphasis_is_spoken_as_plain_text_and_audio_is_refused(client: httpx.Client) -> None:
    emphasized = pcm_of(client, '<speak>It is <emphasis level="strong">very</emphasis> good.</speak>')
    assert np.array_equal(emphasized, pcm_of(client, "<speak>It is very good.</speak>"))
    response = client.post(SPEECH, json=body('<speak>Hi.<audio src="https://example.com/a.wav">a bell</audio></speak>'))
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message.startswith("SSML <audio> at line 1, column 11:") and "fetches no audio files" in message


def test_a_voice_dialogue_over_the_websocket_makes_the_samples_http_makes(client: httpx.Client) -> None:
    """A stream's documents are not known up front: each voice is resolved when it first speaks."""
    ws_url = str(client.base_url).replace("http://", "ws://").rstrip("/") + "/v1/audio/speech/ws"
    config = {"type": "config", "captions": True, **{k: v for k, v in body("").items() if k != "input"}}
    session = ws_session(ws_url, [config, {"type": "text", "text": DIALOGUE}, {"type": "end"}])
    assert session.errors == [] and session.close_code == 1000
    assert bytes(session.utterances[0].audio) == pcm_of(client, DIALOGUE).tobytes()
    assert [c.get("voice") for c in session.utterances[0].captions] == ["nova", "onyx"]
    unknown = ws_session(ws_url, [config, {"type": "text", "text": DIALOGUE.replace("onyx", "nobody-here")},
                                  {"type": "end"}])  # fmt: skip
    assert [e["error"]["code"] for e in unknown.errors] == ["voice_not_found"]
