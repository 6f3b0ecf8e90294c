"""Voices from a reference clip through the real server on loopback: multipart upload of real
speech (espeak-ng) in every container, synthesis with the voice, and every bad clip as a 4xx."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from dataclasses import replace
from functools import cache
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
import soxr

from tests.server.clips import CLIP_TEXT, RATE_HZ, clips_by_format, speech_24k, stereo_16k_wav, wav_bytes
from tests.server.conftest import MAX_NEW_TOKENS, running_server
from tests.server.guards_util import SPEECH
from turbotts import TTS, SamplingParams, SynthesisParams
from turbotts.audio import clip_digest
from turbotts.model.reference import encode_reference
from turbotts.server.audio.encoding import to_int16
from turbotts.server.voices.store import VoiceStore
from turbotts.sources import ModelSource, load_model

MAX_CLIP_BYTES = 2 * 2**20
SPOKEN = "Hello there, this is my voice."
DUMMY = ModelSource(load_format="dummy", dummy_size="tiny")  # the weights the test server loads


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("clone")
    # no watermark: the audio is the engine's own, to compare with the Python API's sample for sample
    with running_server(tmp, max_reference_bytes=MAX_CLIP_BYTES, watermark=False) as (url, _):
        yield url, tmp / "voices.sqlite3"


@pytest.fixture()
def http(server: tuple[str, Path]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server[0], timeout=120) as client:
        yield client


@cache
def _speech() -> np.ndarray:
    return speech_24k()


def _upload(http: httpx.Client, name: str, audio: bytes | None, transcript: str | None = CLIP_TEXT, **extra: str):
    data = {"name": name, **extra}
    if transcript is not None:
        data["transcript"] = transcript
    files = {"audio": ("clip.bin", audio, "application/octet-stream")} if audio is not None else None
    return http.post("/v1/voices", data=data, files=files)


def _spoken(http: httpx.Client, voice: str, fmt: str = "wav", dtype: str = "float32") -> np.ndarray:
    """SPOKEN in ``voice`` over HTTP, decoded (flac is made whole, decoded once as the Python API decodes)."""
    body = {"input": SPOKEN, "voice": voice, "response_format": fmt, "seed": 3}
    response = http.post(SPEECH, json=body)
    assert response.status_code == 200, response.text
    samples, rate = sf.read(io.BytesIO(response.content), dtype=dtype)
    assert rate == RATE_HZ
    return np.asarray(samples)


def test_every_format_clones_and_speaks(http: httpx.Client, server: tuple[str, Path]) -> None:
    clips = clips_by_format(_speech())
    listed_before = {v["name"] for v in http.get("/v1/voices").json()["data"]}
    for fmt, audio in clips.items():
        response = _upload(http, f"clip-{fmt}", audio)
        assert response.status_code == 201, (fmt, response.text)
        body = response.json()
        assert body["kind"] == "reference" and body["transcript"] == CLIP_TEXT and body["has_audio"] is False
        wav = _spoken(http, f"clip-{fmt}")
        assert wav.size > 0 and np.isfinite(wav).all()
    listed = {v["name"]: v for v in http.get("/v1/voices").json()["data"]}
    assert {f"clip-{fmt}" for fmt in clips} <= set(listed) - listed_before
    assert listed["clip-m4a"]["kind"] == "reference"
    assert not np.array_equal(_spoken(http, "clip-wav-16k-stereo"), _spoken(http, "alloy"))


def _flac_int16(http: httpx.Client, voice: str) -> np.ndarray:
    return _spoken(http, voice, "flac", "int16")


def test_a_cloned_voice_speaks_as_the_engine_does_with_the_clip(http: httpx.Client) -> None:
    """Over HTTP a cloned voice is the Python API's synthesis with that clip as its reference, sample for sample."""
    audio = stereo_16k_wav(_speech())
    assert _upload(http, "engine-clip", audio).status_code == 201
    tts = TTS.load(DUMMY, dtype="fp32")
    reference = tts.reference_from_clip(audio, CLIP_TEXT)
    params = SynthesisParams(
        code=SamplingParams(max_new_tokens=MAX_NEW_TOKENS), reference=reference, seed=3, refine_text=False
    )
    cloned, without = (to_int16(tts.synthesize(SPOKEN, p)[0]) for p in (params, replace(params, reference=None)))
    assert cloned.shape != without.shape or not np.array_equal(cloned, without)  # the clip changes this synthesis
    over_http = _flac_int16(http, "engine-clip")
    assert over_http.shape == cloned.shape and np.array_equal(over_http, cloned), "the server ignored the clip"
    assert not np.array_equal(over_http, _flac_int16(http, "alloy"))


def test_stored_string_is_the_clip_encoded_at_24k_mono(http: httpx.Client, server: tuple[str, Path]) -> None:
    """The server decodes, downmixes and resamples (soxr) exactly as the Python API would."""
    audio = stereo_16k_wav(_speech())
    assert _upload(http, "parity-clip", audio).status_code == 201
    samples, rate = sf.read(io.BytesIO(audio), dtype="float32", always_2d=True)
    mono_24k = np.asarray(soxr.resample(samples.mean(axis=1), rate, RATE_HZ, quality="HQ"), np.float32)
    model = load_model(ModelSource(load_format="dummy", dummy_size="tiny"), dtype="fp32")
    store = VoiceStore(server[1])
    try:
        assert store.get("parity-clip").spk_smp == encode_reference(model.modules.dvae, mono_24k)
    finally:
        store.close()


def test_keep_audio_keeps_the_clip(http: httpx.Client, server: tuple[str, Path]) -> None:
    audio = stereo_16k_wav(_speech())
    response = _upload(http, "kept-clip", audio, keep_audio="true")
    assert response.status_code == 201 and response.json()["has_audio"] is True
    store = VoiceStore(server[1])
    try:
        assert store.audio("kept-clip") == audio
        assert store.audio("parity-clip") is None or store.get("parity-clip").has_audio is False
    finally:
        store.close()


def test_json_registers_an_existing_spk_smp_string(http: httpx.Client, server: tuple[str, Path]) -> None:
    assert _upload(http, "source-clip", stereo_16k_wav(_speech())).status_code == 201
    store = VoiceStore(server[1])
    spk_smp = store.get("source-clip").spk_smp
    store.close()
    body = {"name": "from-spk-smp", "spk_smp": spk_smp, "transcript": CLIP_TEXT}
    response = http.post("/v1/voices", json=body)
    assert response.status_code == 201 and response.json()["kind"] == "reference", response.text
    assert np.array_equal(_spoken(http, "from-spk-smp"), _spoken(http, "source-clip"))
    no_transcript = http.post("/v1/voices", json={"name": "x1", "spk_smp": spk_smp})
    assert no_transcript.status_code == 422
    broken = http.post("/v1/voices", json={"name": "x2", "spk_smp": "不是", "transcript": "hi"})
    assert broken.status_code == 400 and "audio prompt" in broken.json()["error"]["message"]


def _bad_cases() -> dict[str, tuple[bytes | None, str | None, int, str]]:
    speech = _speech()
    rng = np.random.default_rng(0)
    long_speech = np.tile(speech, int(np.ceil(31 * RATE_HZ / speech.size)))[: 31 * RATE_HZ]
    return {
        "empty file": (b"", CLIP_TEXT, 400, "invalid_reference_audio"),
        "not audio": (rng.bytes(20_000), CLIP_TEXT, 400, "invalid_reference_audio"),
        "half a second": (wav_bytes(speech[: RATE_HZ // 2], RATE_HZ), CLIP_TEXT, 400, "invalid_reference_audio"),
        "31 seconds": (wav_bytes(long_speech, RATE_HZ), CLIP_TEXT, 400, "invalid_reference_audio"),
        "silence": (wav_bytes(np.zeros(3 * RATE_HZ, np.float32), RATE_HZ), CLIP_TEXT, 400, "invalid_reference_audio"),
        "no audio field": (None, CLIP_TEXT, 400, "invalid_reference_audio"),
        "no transcript": (wav_bytes(speech, RATE_HZ), None, 400, "invalid_input"),
        "blank transcript": (wav_bytes(speech, RATE_HZ), "   ", 400, "invalid_input"),
        "transcript too long": (wav_bytes(speech, RATE_HZ), "a" * 501, 400, "invalid_input"),
        "over the size limit": (b"RIFF" + bytes(MAX_CLIP_BYTES + 1), CLIP_TEXT, 413, "reference_too_large"),
    }


BAD_CASES = (
    "empty file", "not audio", "half a second", "31 seconds", "silence", "no audio field", "no transcript",
    "blank transcript", "transcript too long", "over the size limit",
)  # fmt: skip


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_clips_get_a_clear_4xx(http: httpx.Client, case: str) -> None:
    audio, transcript, status, code = _bad_cases()[case]
    listed = http.get("/v1/voices").json()["data"]
    response = _upload(http, "bad-clip", audio, transcript)
    assert response.status_code == status, (case, response.text)
    error = response.json()["error"]
    assert error["code"] == code and error["message"], (case, error)
    if status == 400 and code == "invalid_reference_audio":
        assert error["param"] == "audio"
    assert http.get("/v1/voices").json()["data"] == listed  # nothing was saved, under any name


def test_bad_names_and_duplicates(http: httpx.Client) -> None:
    audio = stereo_16k_wav(_speech())
    assert _upload(http, "dup-clip", audio).status_code == 201
    duplicate = _upload(http, "dup-clip", audio)
    assert duplicate.status_code == 409
    assert _upload(http, "alloy", audio).status_code == 409
    bad_name = _upload(http, "no spaces allowed", audio)
    assert bad_name.status_code == 400 and bad_name.json()["error"]["param"] == "name"
    assert _upload(http, "flag-clip", audio, keep_audio="perhaps").status_code == 400
    garbled = http.post(
        "/v1/voices", content=b"--x\r\nnot a form", headers={"Content-Type": "multipart/form-data; boundary=x"}
    )
    assert 400 <= garbled.status_code < 500 and garbled.json()["error"]["message"]


def test_the_clip_reaches_the_logs_only_as_its_digest(http: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    audio = stereo_16k_wav(_speech()[: 2 * RATE_HZ])
    transcript = "Zyxwq secret words of the clip"
    with caplog.at_level(logging.DEBUG):
        assert _upload(http, "logged-clip", audio, transcript).status_code == 201
        _spoken(http, "logged-clip")
    joined = "\n".join(record.getMessage() for record in caplog.records)
    assert clip_digest(audio) in joined
    assert "Zyxwq" not in joined and "secret words" not in joined
