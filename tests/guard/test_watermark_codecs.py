"""The watermark through the server's own encoders (``turbotts.server.audio.encoding``), decoded by PyAV.

``test_watermark.py`` encodes with its own PyAV settings; what a client receives is made
by :class:`StreamEncoder` (streamed, as the routes send it) or :func:`encode_audio`, with
the server's codec options and bit rates. These tests mark exactly as ``service.py``
does (``WatermarkStream.push`` on each chunk, then ``StreamEncoder.encode``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from tests.guard.watermark_signals import speech_like
from tests.guard.watermark_speech import SAMPLE_RATE_HZ, decode_av, espeak_or_skip, server_round_trip
from turbotts.guard.watermark import Payload, WatermarkStream, coded_bit_accuracy, detect, embed
from turbotts.server.audio.encoding import StreamEncoder

KEY = bytes.fromhex("3c" * 32)
PAYLOAD = Payload.for_request(42, "a request text", datetime(2025, 6, 1, 8, 15, tzinfo=timezone.utc))
LOSSY = ("mp3", "opus", "aac")
CHUNK_LEN = 4_800  # 0.2 s, like the engine's streamed chunks


def _served(wav: np.ndarray, fmt: str, bit_rate_kbps: int | None) -> bytes:
    """What a streamed response body holds: marked chunk by chunk, encoded chunk by chunk."""
    mark, encoder = WatermarkStream(KEY, PAYLOAD), StreamEncoder(fmt, SAMPLE_RATE_HZ, bit_rate_kbps=bit_rate_kbps)
    parts = [encoder.encode(mark.push(wav[i : i + CHUNK_LEN])) for i in range(0, len(wav), CHUNK_LEN)]
    return b"".join([*parts, encoder.finish()])


@pytest.fixture(scope="module")
def two_seconds() -> np.ndarray:
    return speech_like(2.0, seed=11)


@pytest.fixture(scope="module")
def espeak() -> np.ndarray:
    return espeak_or_skip()


@pytest.mark.parametrize("bit_rate_kbps", [64, None], ids=["64kbps", "server-default"])
@pytest.mark.parametrize("fmt", LOSSY)
def test_streamed_server_encoding_keeps_the_payload(
    two_seconds: np.ndarray, fmt: str, bit_rate_kbps: int | None
) -> None:
    """2 s of speech-like audio, marked and encoded as the server streams it, at 64 kbit/s and the default
    (mp3 128, opus 64, aac 96; tests/server/test_audio_encoding.py checks that the rate reaches the codec)."""
    decoded, rate_hz = decode_av(_served(two_seconds, fmt, bit_rate_kbps))
    assert detect(decoded, rate_hz, KEY) == PAYLOAD
    assert detect(decoded, rate_hz, bytes.fromhex("c3" * 32)) is None


@pytest.mark.parametrize("fmt", LOSSY)
def test_one_shot_server_encoding_at_64_kbps_keeps_the_payload(two_seconds: np.ndarray, fmt: str) -> None:
    decoded, rate_hz = server_round_trip(embed(two_seconds, KEY, PAYLOAD), fmt, bit_rate_kbps=64)
    assert detect(decoded, rate_hz, KEY) == PAYLOAD


def test_unmarked_audio_through_the_same_encoders_has_no_mark(two_seconds: np.ndarray) -> None:
    for fmt in LOSSY:
        decoded, rate_hz = server_round_trip(two_seconds, fmt, bit_rate_kbps=64)
        assert detect(decoded, rate_hz, KEY) is None, fmt


@pytest.mark.parametrize("fmt", ["wav", "flac", *LOSSY])
def test_espeak_speech_through_every_server_codec(espeak: np.ndarray, fmt: str) -> None:
    """A real spoken sentence (espeak-ng, soxr to 24 kHz): the whole clip and a 2 s excerpt of it."""
    assert len(espeak) > 6 * SAMPLE_RATE_HZ  # the sentence lasts about 8 s
    decoded, rate_hz = server_round_trip(embed(espeak, KEY, PAYLOAD), fmt, bit_rate_kbps=64)
    assert detect(decoded, rate_hz, KEY) == PAYLOAD
    excerpt = decoded[int(2.5 * rate_hz) : int(4.5 * rate_hz)]  # mid-sentence, at no frame boundary
    assert detect(excerpt, rate_hz, KEY) == PAYLOAD
    assert coded_bit_accuracy(excerpt, rate_hz, KEY, PAYLOAD) >= 0.9


def test_espeak_speech_unmarked_has_no_mark(espeak: np.ndarray) -> None:
    for fmt in ("wav", *LOSSY):
        decoded, rate_hz = server_round_trip(espeak, fmt, bit_rate_kbps=64)
        assert detect(decoded, rate_hz, KEY) is None, fmt
        assert 0.3 < coded_bit_accuracy(decoded, rate_hz, KEY, PAYLOAD) < 0.7, fmt  # coin tosses


def test_accuracy_script_on_espeak_speech(espeak: np.ndarray) -> None:
    """``scripts/watermark_accuracy.py`` prints the figures the docs quote: JSON per format."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "watermark_accuracy.py"
    result = subprocess.run(
        [sys.executable, str(script), "--formats", "flac,opus", "--hop-s", "1.0"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    figures = json.loads(result.stdout)
    assert set(figures) == {"flac", "opus"}
    assert figures["opus"]["bit_rate_kbps"] == 64 and figures["flac"]["bit_rate_kbps"] is None
    for fmt, entry in figures.items():
        assert entry["detected"] and entry["num_detected"] == entry["num_excerpts"] >= 5, fmt
        assert 0.9 <= entry["bit_accuracy_min"] <= entry["bit_accuracy"] <= 1.0, fmt
