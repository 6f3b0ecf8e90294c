"""Watermark: exact round trips through 16-bit WAV and FLAC, lossy codecs, streaming, no false positives."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf

from tests.guard.watermark_signals import SAMPLE_RATE_HZ, speech_like
from turbotts.guard.watermark import Payload, WatermarkConfig, WatermarkStream, detect, embed, snr_db
from turbotts.guard.watermark_cli import watermark_detect_command
from turbotts.guard.watermark_code import (
    CRC_BITS,
    NUM_TAIL_BITS,
    PAYLOAD_BITS,
    _convolve,
    _int_to_bits,
    crc16,
    decode,
    encode,
)

KEY = bytes(range(32))
PAYLOAD = Payload.for_request(7, "request-42", datetime(2025, 3, 1, 12, 34, tzinfo=timezone.utc))


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return speech_like(4.0, seed=3)


@pytest.fixture(scope="module")
def marked(speech: np.ndarray) -> np.ndarray:
    return embed(speech, KEY, PAYLOAD)


def _encode(wav: np.ndarray, container: str, codec: str, bit_rate: int, rate_hz: int) -> bytes:
    """Encode with PyAV at ``bit_rate`` (resampled to ``rate_hz`` where the codec needs it)."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate_hz)
        assert isinstance(stream, av.audio.stream.AudioStream)
        stream.bit_rate = bit_rate
        stream.layout = "mono"
        resampler = av.AudioResampler(format=stream.codec_context.format, layout="mono", rate=rate_hz)
        frame = av.AudioFrame.from_ndarray(wav.astype(np.float32)[None, :], format="flt", layout="mono")
        frame.sample_rate = SAMPLE_RATE_HZ
        for converted in [*resampler.resample(frame), *resampler.resample(None)]:
            for packet in stream.encode(converted):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


def _lossy(wav: np.ndarray, container: str, codec: str, bit_rate: int, rate_hz: int) -> tuple[np.ndarray, int]:
    """Encode and decode again, as a listener's player would."""
    buffer = io.BytesIO(_encode(wav, container, codec, bit_rate, rate_hz))
    to_float = av.AudioResampler(format="flt", layout="mono")
    with av.open(buffer, "r") as inp:
        assert isinstance(inp, av.container.InputContainer)
        frames = list(inp.decode(audio=0))
    chunks = [c.to_ndarray().reshape(-1) for f in frames for c in to_float.resample(f)]
    return np.concatenate(chunks), frames[0].sample_rate


def test_payload_code_round_trip_and_crc() -> None:
    bits = encode(PAYLOAD)
    assert len(bits) == 156
    assert decode(1.0 - 2.0 * bits) == PAYLOAD
    assert PAYLOAD.timestamp == datetime(2025, 3, 1, 12, 34, tzinfo=timezone.utc)
    noisy = 1.0 - 2.0 * bits + np.random.default_rng(0).normal(0, 0.5, bits.size)
    assert decode(noisy) == PAYLOAD  # Viterbi corrects symbol errors


def _codeword(data: np.ndarray, crc: int) -> np.ndarray:
    """Soft symbols of a *valid* convolutional codeword for ``data`` followed by ``crc``: Viterbi decodes it
    without a single symbol error, so only the CRC check can tell that it is corrupt."""
    framed = np.concatenate([data, _int_to_bits(crc, CRC_BITS), np.zeros(NUM_TAIL_BITS, dtype=np.uint8)])
    return 1.0 - 2.0 * _convolve(framed).astype(np.float64)


def test_crc_rejects_a_corrupted_payload_and_passes_the_intact_one() -> None:
    """``decode`` documents None when the decoded CRC does not match (``detect`` passes that None on)."""
    data = _int_to_bits(PAYLOAD.to_int(), PAYLOAD_BITS)
    crc = crc16(data)
    assert decode(_codeword(data, crc)) == PAYLOAD  # intact: exactly the payload
    flipped = data.copy()
    flipped[20] ^= 1  # one timestamp bit changed, CRC of the original kept
    assert decode(_codeword(flipped, crc)) is None
    assert decode(_codeword(data, crc ^ 0x0001)) is None  # the CRC itself damaged
    assert decode(_codeword(data, crc ^ 0x8000)) is None
    assert decode(np.ones(156)) is None  # all-zero coded bits: a zero payload whose CRC is not 0
    wrong_frame = encode(PAYLOAD).copy()
    wrong_frame[:40] ^= 1  # 40 symbol errors at the start: beyond what Viterbi can correct
    assert decode(1.0 - 2.0 * wrong_frame) is None


@pytest.mark.parametrize("fmt", [("WAV", "PCM_16"), ("FLAC", "PCM_16")])
def test_survives_16_bit_files(tmp_path: Path, marked: np.ndarray, fmt: tuple[str, str]) -> None:
    path = tmp_path / f"marked.{fmt[0].lower()}"
    sf.write(path, marked, SAMPLE_RATE_HZ, format=fmt[0], subtype=fmt[1])
    data, rate_hz = sf.read(path, dtype="float32")
    assert rate_hz == SAMPLE_RATE_HZ
    assert detect(data, rate_hz, KEY) == PAYLOAD
    assert detect(data[SAMPLE_RATE_HZ // 3 : SAMPLE_RATE_HZ // 3 + 2 * SAMPLE_RATE_HZ], rate_hz, KEY) == PAYLOAD


@pytest.mark.parametrize(
    ("container", "codec", "bit_rate", "rate_hz"),
    [("mp3", "libmp3lame", 128_000, 24_000), ("mp3", "libmp3lame", 64_000, 24_000), ("ogg", "libopus", 64_000, 48_000)],
)
def test_survives_lossy_codecs(marked: np.ndarray, container: str, codec: str, bit_rate: int, rate_hz: int) -> None:
    """Documented: mp3 at 64-128 kbps and opus at 64 kbps (32 kbps too, in our measurements) keep the mark."""
    decoded, decoded_rate_hz = _lossy(marked, container, codec, bit_rate, rate_hz)
    assert detect(decoded, decoded_rate_hz, KEY) == PAYLOAD


def test_no_false_positive(speech: np.ndarray, marked: np.ndarray) -> None:
    rng = np.random.default_rng(1)
    assert detect(speech, SAMPLE_RATE_HZ, KEY) is None
    assert detect(rng.normal(0, 0.1, 3 * SAMPLE_RATE_HZ), SAMPLE_RATE_HZ, KEY) is None
    assert detect(np.zeros(2 * SAMPLE_RATE_HZ), SAMPLE_RATE_HZ, KEY) is None
    assert detect(marked, SAMPLE_RATE_HZ, b"another key") is None
    assert detect(marked[: SAMPLE_RATE_HZ // 2], SAMPLE_RATE_HZ, KEY) is None  # shorter than one frame


def test_stream_equals_one_shot(speech: np.ndarray, marked: np.ndarray) -> None:
    stream, parts, position = WatermarkStream(KEY, PAYLOAD), [], 0
    rng = np.random.default_rng(2)
    while position < len(speech):
        size = int(rng.integers(1, 6_000))
        parts.append(stream.push(speech[position : position + size]))
        position += size
    streamed = np.concatenate(parts)
    assert streamed.dtype == np.float32 and len(streamed) == len(speech)
    assert np.array_equal(streamed, marked)
    assert detect(streamed, SAMPLE_RATE_HZ, KEY) == PAYLOAD


def test_mark_is_quiet(speech: np.ndarray, marked: np.ndarray) -> None:
    assert snr_db(speech, marked) >= 28.0  # measured 30.0 dB at the default strength (-30 dB)
    assert np.max(np.abs(marked)) <= 1.0


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="strength_db"):
        WatermarkConfig(strength_db=3.0)
    with pytest.raises(ValueError, match="empty"):
        WatermarkStream(b"", PAYLOAD)
    with pytest.raises(ValueError, match="key_id"):
        Payload(key_id=256, timestamp_min=0, request_hash=0)


def test_cli_detect(tmp_path: Path, speech: np.ndarray, marked: np.ndarray, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "marked.mp3").write_bytes(_encode(marked, "mp3", "libmp3lame", 128_000, 24_000))
    sf.write(tmp_path / "marked.flac", marked, SAMPLE_RATE_HZ)
    sf.write(tmp_path / "plain.wav", speech, SAMPLE_RATE_HZ, subtype="PCM_16")
    (tmp_path / "broken.mp3").write_bytes(b"not audio at all")
    assert watermark_detect_command(str(tmp_path / "marked.flac"), KEY) == 0
    assert watermark_detect_command(str(tmp_path / "marked.mp3"), KEY) == 0
    out = capsys.readouterr().out
    assert "key id:       7" in out and "2025-03-01T12:34:00+00:00" in out and f"{PAYLOAD.request_hash:04x}" in out
    assert watermark_detect_command(str(tmp_path / "plain.wav"), KEY) == 1
    assert watermark_detect_command(str(tmp_path / "broken.mp3"), KEY) == 2
    assert watermark_detect_command(str(tmp_path / "missing.wav"), KEY) == 2
