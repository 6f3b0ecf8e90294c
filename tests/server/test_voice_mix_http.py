"""Voice mixing through the real server: ``alloy+nova`` and ``alloy*0.7+nova*0.3`` in a speech request,
saved mixes, and the 400s (a reference-clip voice, a malformed mix)."""

from __future__ import annotations

import httpx
import pytest

from tests.server.clips import speech_24k, stereo_16k_wav
from tests.server.guards_util import SPEECH
from turbotts.model.speaker import encode_voice, sample_random_voice
from turbotts.model.voice_mix import mix_voices
from turbotts.server.voices.store import BUILTIN_VOICE_SEEDS
from turbotts.sources import ModelSource, speaker_stats_for


@pytest.fixture()
def http(exact_http: httpx.Client) -> httpx.Client:
    """The watermark-free server: these tests compare two requests' audio sample for sample."""
    return exact_http


def _pcm(http: httpx.Client, voice: str) -> httpx.Response:
    body = {"input": "Mixing test.", "voice": voice, "response_format": "pcm", "seed": 5, "max_new_tokens": 6}
    return http.post(SPEECH, json=body)


def _expected_mix(weights: dict[str, float]) -> str:
    stats = speaker_stats_for(ModelSource(load_format="dummy", dummy_size="tiny"))
    vectors = [sample_random_voice(stats, BUILTIN_VOICE_SEEDS[name]) for name in weights]
    return encode_voice(mix_voices(vectors, list(weights.values())))


def test_a_mix_is_the_weighted_mean_of_the_speaker_vectors(http: httpx.Client) -> None:
    weighted = _pcm(http, "alloy*0.7+nova*0.3")
    assert weighted.status_code == 200, weighted.text
    assert weighted.content == _pcm(http, _expected_mix({"alloy": 0.7, "nova": 0.3})).content
    equal = _pcm(http, "alloy+nova")
    assert equal.content == _pcm(http, _expected_mix({"alloy": 0.5, "nova": 0.5})).content
    assert equal.content != weighted.content != _pcm(http, "alloy").content
    assert _pcm(http, "alloy*7+nova*3").content == weighted.content  # weights are shares


def test_saved_mixes(http: httpx.Client) -> None:
    created = http.post("/v1/voices", json={"name": "blend-73", "mix": "alloy*0.7+nova*0.3"})
    assert created.status_code == 201 and created.json()["kind"] == "mix", created.text
    assert _pcm(http, "blend-73").content == _pcm(http, "alloy*0.7+nova*0.3").content
    assert _pcm(http, "blend-73+echo").status_code == 200  # a saved mix can be part of a mix
    assert http.post("/v1/voices", json={"name": "blend-bad", "mix": "alloy+nobody-here"}).status_code == 404
    nested = http.post("/v1/voices", json={"name": "blend-2", "mix": "blend-73+echo"})
    assert nested.status_code == 201
    too_deep = _pcm(http, "blend-2+alloy")
    assert too_deep.status_code == 400 and too_deep.json()["error"]["code"] == "invalid_voice_mix"


def test_reference_voices_cannot_be_mixed(http: httpx.Client) -> None:
    clip = stereo_16k_wav(speech_24k())
    files = {"audio": ("clip.wav", clip, "audio/wav")}
    created = http.post("/v1/voices", data={"name": "mix-ref", "transcript": "A clip."}, files=files)
    assert created.status_code == 201, created.text
    response = _pcm(http, "alloy+mix-ref")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_voice_mix" and "reference clip" in error["message"] and error["param"] == "voice"
    saved = http.post("/v1/voices", json={"name": "mix-ref-2", "mix": "mix-ref*0.5+nova*0.5"})
    assert saved.status_code == 400


def test_malformed_mixes_get_400_naming_the_problem(http: httpx.Client) -> None:
    for voice in ("alloy+", "alloy*zero+nova", "alloy*0+nova"):
        response = _pcm(http, voice)
        assert response.status_code == 400, (voice, response.text)
        assert response.json()["error"]["code"] == "invalid_voice_mix"
    assert _pcm(http, "alloy+nobody-here").status_code == 404
