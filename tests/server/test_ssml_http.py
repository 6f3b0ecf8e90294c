"""SSML over real HTTP: exact silences, rates, spoken text in the captions, and 400s that say where."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tests.server.audio import decode
from tests.server.conftest import running_server
from tests.server.test_captions_http import SEGMENT, body, sse_events

SPEECH = "/v1/audio/speech"
HALF_SECOND = 12000  # samples at 24 kHz
WATERMARK_BLOCK = 240  # the mark's envelope: 10 ms blocks, each at the level of the block before


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server without the watermark, so silence stays bit-exact zeros."""
    with (
        running_server(tmp_path_factory.mktemp("ssml"), watermark=False) as (base_url, _),
        httpx.Client(base_url=base_url, timeout=120) as http,
    ):
        yield http


def segments_and_pcm(http: httpx.Client, ssml: str, **extra: Any) -> tuple[list[dict[str, Any]], np.ndarray]:
    events = sse_events(http, body(ssml, **extra))
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    return [e for e in events if e["type"] == SEGMENT], np.frombuffer(pcm, dtype="<i2")


def at(seconds: float) -> int:
    return round(seconds * 24000)


def test_break_inserts_exactly_that_much_silence(client: httpx.Client) -> None:
    template = '<speak><s>One two three.</s><break time="{}"/><s>Four five six.</s></speak>'
    segments, pcm = segments_and_pcm(client, template.format("500ms"))
    assert [s["text"] for s in segments] == ["One two three.", "Four five six."]
    gap = pcm[at(segments[0]["end"]) : at(segments[1]["start"])]
    assert gap.size == HALF_SECOND and not gap.any()  # every sample of the break is zero
    assert pcm[at(segments[0]["end"]) - 1] != 0 or pcm[at(segments[1]["start"])] != 0  # speech on either side
    assert at(segments[-1]["end"]) == pcm.size
    _, no_pause = segments_and_pcm(client, template.format("0s"))
    _, longer = segments_and_pcm(client, template.format("1.5s"))
    assert pcm.size - no_pause.size == HALF_SECOND and longer.size - no_pause.size == 3 * HALF_SECOND


def test_with_the_watermark_a_break_is_as_long_and_silent_after_its_first_block(http: httpx.Client) -> None:
    """The default server marks audio; the mark's level lags one 10 ms block, so only the break's start carries it."""
    segments, pcm = segments_and_pcm(http, '<speak>One two three.<break time="500ms"/>Four five six.</speak>')
    gap = pcm[at(segments[0]["end"]) : at(segments[1]["start"])]
    assert gap.size == HALF_SECOND
    assert not gap[2 * WATERMARK_BLOCK :].any()


def test_prosody_rate_stretches_its_segment_exactly(client: httpx.Client) -> None:
    plain, _ = segments_and_pcm(client, "<speak><s>One two three.</s><s>Four five six.</s></speak>")
    slow, pcm = segments_and_pcm(
        client, '<speak><s>One two three.</s><prosody rate="50%"><s>Four five six.</s></prosody></speak>'
    )
    fast, _ = segments_and_pcm(
        client, '<speak><s>One two three.</s><prosody rate="x-fast"><s>Four five six.</s></prosody></speak>'
    )

    def length(segment: dict[str, Any]) -> int:
        return at(segment["end"]) - at(segment["start"])

    assert length(slow[1]) == 2 * length(plain[1])  # half the rate: twice the samples (round(n / 0.5))
    assert length(fast[1]) == round(length(plain[1]) / 2.0)
    assert at(slow[-1]["end"]) == pcm.size


def test_say_as_sub_and_phoneme_change_what_is_said(client: httpx.Client) -> None:
    ssml = (
        '<speak>Room <say-as interpret-as="digits">42</say-as> has <say-as interpret-as="cardinal">1,200</say-as> '
        'books. Call <say-as interpret-as="telephone">555-0199</say-as>. <sub alias="World Wide Web">WWW</sub> '
        'and <phoneme alphabet="x-homophone" ph="tomahto">tomato</phoneme> [uv_break] ok.</speak>'
    )
    segments, _ = segments_and_pcm(client, ssml)
    spoken = " ".join(s["text"] for s in segments)
    assert spoken == (
        "Room four two has one thousand two hundred books. Call five five five, zero one nine nine. "
        "World Wide Web and tomahto ok."
    )


def test_p_and_s_are_segment_boundaries(http: httpx.Client) -> None:
    """On the default server (120 characters a segment) plain text packs into one segment; SSML cuts it."""
    plain = [e for e in sse_events(http, body("Hi there. Bye. New one.")) if e["type"] == SEGMENT]
    ssml = [
        e for e in sse_events(http, body("<speak><p><s>Hi there.</s><s>Bye.</s></p><p>New one.</p></speak>"))
        if e["type"] == SEGMENT
    ]  # fmt: skip
    assert [s["text"] for s in plain] == ["Hi there. Bye. New one."]
    assert [s["text"] for s in ssml] == ["Hi there.", "Bye.", "New one."]


def error_of(http: httpx.Client, text: str, **extra: Any) -> dict[str, Any]:
    response = http.post(SPEECH, json=body(text, **extra))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_ssml" and error["param"] == "input"
    return error


BOMB = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
    '<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]><speak>&lol3;</speak>'
)
EXTERNAL = '<!DOCTYPE speak [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><speak>&xxe;</speak>'


def test_entity_bomb_and_external_entity_are_refused(http: httpx.Client) -> None:
    for document in (BOMB, EXTERNAL):
        error = error_of(http, document, input_format="ssml")
        assert "document type declarations and entities are not accepted" in error["message"]
        assert "passwd" not in error["message"] and "lollol" not in error["message"]


def test_malformed_markup_names_the_element_and_position(http: httpx.Client) -> None:
    error = error_of(http, '<speak>Hello <prosody rate="slow">world.\n</speak>')
    assert "not well-formed" in error["message"] and "line 2, column" in error["message"]
    assert "<prosody> opened at line 1, column 14" in error["message"]
    error = error_of(http, "<speak>Tom & Jerry</speak>")  # expat stops just after the bare &
    assert "at line 1, column 13 (invalid token) inside <speak>" in error["message"]


def test_unsupported_markup_is_a_400_naming_it(http: httpx.Client) -> None:
    error = error_of(http, '<speak>Hi.\n  <audio src="https://example.com/a.wav"/></speak>')
    assert error["message"].startswith("SSML <audio> at line 2, column 3: this element is not supported")
    cases = {
        '<speak><prosody pitch="high">Hi.</prosody></speak>': "<prosody> at line 1, column 8: attribute 'pitch'",
        '<speak><phoneme alphabet="ipa" ph="t">t</phoneme></speak>': "alphabet 'ipa' is not supported",
        '<speak><say-as interpret-as="cardinal">many</say-as></speak>': "cardinal takes a number",
        '<speak><say-as interpret-as="ordinal">3</say-as></speak>': "interpret-as='ordinal' is not supported",
        '<speak>a<break time="11s"/>b</speak>': "at most 10000 ms",
        "<speak><speak>a</speak></speak>": "only the root",
    }
    for document, expected in cases.items():
        assert expected in error_of(http, document)["message"], document
    assert "must be the root" in error_of(http, "<p>Hi.</p>", input_format="ssml")["message"]


def test_input_format_decides_and_plain_text_stays_plain(http: httpx.Client) -> None:
    error = error_of(http, "just words", input_format="ssml")
    assert "line 1, column 1" in error["message"]
    as_text = http.post(SPEECH, json=body("<speak>Hello there.</speak>", input_format="text"))
    assert as_text.status_code == 200  # tags stripped, as for any plain text
    nothing = http.post(SPEECH, json=body('<speak><break time="1s"/></speak>'))
    assert nothing.status_code == 400 and "nothing to say" in nothing.json()["error"]["message"]
    too_fast = http.post(SPEECH, json=body('<speak><prosody rate="x-fast">Hi.</prosody></speak>', speed=4.0))
    assert too_fast.status_code == 400 and "prosody rate" in too_fast.json()["error"]["message"]


def test_the_server_still_speaks_after_the_bad_documents(http: httpx.Client) -> None:
    response = http.post(SPEECH, json=body("<speak>Still here.</speak>", response_format="wav"))
    assert response.status_code == 200 and decode(response.content, "wav")[1].size > 0
