"""Every response format, one-shot and streamed, decoded back with real decoders."""

from __future__ import annotations

import io
import struct
import time

import av
import numpy as np
import pytest
import soundfile as sf

from turbotts.errors import InvalidInputError, TurboTTSError
from turbotts.server.audio.encoding import (
    BIT_RATE_RANGES_KBPS,
    BUFFERED_FORMATS,
    CONTENT_TYPES,
    DEFAULT_BIT_RATES_KBPS,
    SUPPORTED_FORMATS,
    StreamEncoder,
    encode_audio,
    to_int16,
)

SR = 24000
LOSSLESS = ("wav", "flac", "pcm")
LOSSY = ("mp3", "opus", "aac")
# How much longer a decoded lossy stream may be (encoder priming and frame padding that
# the container does not tell the decoder to trim), and how much shorter.
MAX_EXTRA_S = {"mp3": 0.1, "opus": 0.03, "aac": 0.1}
MAX_MISSING_S = 0.01


def _test_signal(duration_s: float = 2.0) -> np.ndarray:
    """A harmonic tone plus a sweep: broadband enough to catch misaligned or garbled output."""
    t = np.arange(round(duration_s * SR)) / SR
    tone = sum(0.15 / k * np.sin(2 * np.pi * 220 * k * t) for k in range(1, 5))
    sweep = 0.2 * np.sin(2 * np.pi * (100 * t + 400 * t**2))  # 100 Hz -> 1.7 kHz
    return (tone + sweep).astype(np.float32)


def _uneven_chunks(pcm: np.ndarray, seed: int = 0) -> list[np.ndarray]:
    """Chunks of 0.1-0.5 s, like the engine's streaming output."""
    rng = np.random.default_rng(seed)
    chunks, start = [], 0
    while start < pcm.size:
        size = int(rng.integers(round(0.1 * SR), round(0.5 * SR)))
        chunks.append(pcm[start : start + size])
        start += size
    return chunks


def _encode_streamed(pcm: np.ndarray, fmt: str) -> list[bytes]:
    encoder = StreamEncoder(fmt)
    return [encoder.encode(chunk) for chunk in _uneven_chunks(pcm)] + [encoder.finish()]


def _decode_av(data: bytes, fmt: str) -> tuple[int, int, np.ndarray]:
    """Decode with libavcodec; returns (sample rate, channels, samples as in the codec's own type)."""
    options = {"sample_rate": str(SR), "ch_layout": "mono"} if fmt == "pcm" else {}
    with av.open(io.BytesIO(data), format="s16le" if fmt == "pcm" else None, options=options) as container:
        stream = container.streams.audio[0]
        frames = [frame.to_ndarray() for frame in container.decode(stream)]  # each (1, T) or (T,)
        samples = np.concatenate([f.reshape(-1) for f in frames])
        return stream.codec_context.sample_rate, stream.codec_context.layout.nb_channels, samples


def _upsample_2x(pcm: np.ndarray) -> np.ndarray:
    """Band-limited 2x upsampling (zero-padded spectrum), to compare with 48 kHz opus."""
    spectrum = np.fft.rfft(pcm)
    padded = np.concatenate([spectrum, np.zeros(pcm.size, dtype=spectrum.dtype)])
    return np.fft.irfft(padded, n=2 * pcm.size) * 2


def _aligned_correlation(reference: np.ndarray, decoded: np.ndarray, max_lag: int) -> float:
    """Best normalized correlation over decoder delays 0..max_lag (one FFT, not a loop of dot products)."""
    decoded = np.concatenate([decoded, np.zeros(max(reference.size + max_lag - decoded.size, 0))])
    n = 1 << (decoded.size + reference.size).bit_length()
    dots = np.fft.irfft(np.fft.rfft(decoded, n) * np.conj(np.fft.rfft(reference, n)), n)[: max_lag + 1]
    energy = np.concatenate([[0.0], np.cumsum(decoded**2)])
    window_norms = np.sqrt(energy[reference.size : reference.size + max_lag + 1] - energy[: max_lag + 1])
    return float(np.max(dots / (np.linalg.norm(reference) * window_norms + 1e-12)))


@pytest.fixture(scope="module")
def signal() -> np.ndarray:
    return _test_signal()


@pytest.fixture(scope="module", params=["oneshot", "streamed"])
def encoded(request: pytest.FixtureRequest, signal: np.ndarray) -> dict[str, bytes]:
    if request.param == "oneshot":
        return {fmt: encode_audio(signal, fmt) for fmt in SUPPORTED_FORMATS}
    return {fmt: b"".join(_encode_streamed(signal, fmt)) for fmt in SUPPORTED_FORMATS}


@pytest.mark.parametrize("fmt", LOSSLESS)
def test_lossless_formats_round_trip_exactly(fmt: str, encoded: dict[str, bytes], signal: np.ndarray) -> None:
    rate, channels, decoded = _decode_av(encoded[fmt], fmt)
    assert (rate, channels) == (SR, 1)
    assert decoded.dtype == np.int16
    np.testing.assert_array_equal(decoded, to_int16(signal))


@pytest.mark.parametrize("fmt", LOSSY)
def test_lossy_formats_decode_to_the_signal(fmt: str, encoded: dict[str, bytes], signal: np.ndarray) -> None:
    rate, channels, decoded = _decode_av(encoded[fmt], fmt)
    expected_rate = 48000 if fmt == "opus" else SR
    assert (rate, channels) == (expected_rate, 1)
    reference = _upsample_2x(signal) if fmt == "opus" else signal.astype(np.float64)
    extra_s = (decoded.size - reference.size) / rate
    assert -MAX_MISSING_S <= extra_s <= MAX_EXTRA_S[fmt]
    assert _aligned_correlation(reference, decoded.astype(np.float64), max_lag=round(0.1 * rate)) > 0.99


def test_wav_reads_with_soundfile(encoded: dict[str, bytes], signal: np.ndarray) -> None:
    decoded, rate = sf.read(io.BytesIO(encoded["wav"]), dtype="int16")
    assert rate == SR
    np.testing.assert_array_equal(decoded, to_int16(signal))


def test_oneshot_flac_reads_with_soundfile(signal: np.ndarray) -> None:
    decoded, rate = sf.read(io.BytesIO(encode_audio(signal, "flac")), dtype="int16")
    assert rate == SR
    np.testing.assert_array_equal(decoded, to_int16(signal))


def _streaminfo(flac: bytes) -> dict[str, int]:
    """The STREAMINFO fields of a FLAC file (the first metadata block, right after ``fLaC``)."""
    assert flac[:4] == b"fLaC" and flac[4] & 0x7F == 0  # block type 0 = STREAMINFO
    info = flac[8:42]
    packed = int.from_bytes(info[10:18], "big")  # rate:20 channels-1:3 bps-1:5 total:36
    return {
        "min_frame_bytes": int.from_bytes(info[4:7], "big"),
        "max_frame_bytes": int.from_bytes(info[7:10], "big"),
        "rate_hz": packed >> 44,
        "num_total_samples": packed & ((1 << 36) - 1),
        "md5": int.from_bytes(info[18:34], "big"),
    }


def test_streamed_flac_is_one_complete_file_that_soundfile_reads(signal: np.ndarray) -> None:
    # A zero (unknown) sample count makes libsndfile report 2**63-1 frames and fail to read:
    # the encoder holds FLAC back until it can write the exact STREAMINFO.
    pieces = _encode_streamed(signal, "flac")
    assert all(piece == b"" for piece in pieces[:-1])
    info = _streaminfo(pieces[-1])
    assert info["rate_hz"] == SR and info["num_total_samples"] == signal.size
    assert 0 < info["min_frame_bytes"] <= info["max_frame_bytes"] and info["md5"] != 0
    decoded, rate = sf.read(io.BytesIO(pieces[-1]), dtype="int16")
    assert rate == SR
    np.testing.assert_array_equal(decoded, to_int16(signal))


def test_wav_headers_say_streaming_or_exact_size(signal: np.ndarray) -> None:
    streamed = b"".join(_encode_streamed(signal, "wav"))
    oneshot = encode_audio(signal, "wav")
    assert streamed[44:] == oneshot[44:]
    assert struct.unpack("<I", streamed[4:8])[0] == struct.unpack("<I", streamed[40:44])[0] == 0xFFFFFFFF
    assert struct.unpack("<I", oneshot[40:44])[0] == 2 * signal.size
    assert struct.unpack("<I", oneshot[4:8])[0] == len(oneshot) - 8


@pytest.mark.parametrize("fmt", sorted(set(SUPPORTED_FORMATS) - BUFFERED_FORMATS))
def test_streamed_bytes_come_out_early(fmt: str, signal: np.ndarray) -> None:
    parts = _encode_streamed(signal, fmt)
    assert len(parts[0]) > 0, "the first chunk must produce bytes (header and/or audio)"
    before_finish = sum(len(p) for p in parts[:-1])
    assert before_finish >= 0.6 * sum(len(p) for p in parts), "output must not be held back until finish()"


@pytest.mark.parametrize("fmt", SUPPORTED_FORMATS)
def test_encoding_ten_seconds_is_fast(fmt: str) -> None:
    pcm = _test_signal(10.0)
    start = time.perf_counter()
    encoder = StreamEncoder(fmt)
    for chunk in np.array_split(pcm, 20):
        encoder.encode(chunk)
    encoder.finish()
    assert time.perf_counter() - start < 1.0


def test_pcm_is_clipped_little_endian_int16() -> None:
    data = encode_audio(np.array([0.0, 0.5, 2.0, -3.0, np.nan], dtype=np.float32), "pcm")
    assert np.frombuffer(data, dtype="<i2").tolist() == [0, 16384, 32767, -32767, 0]


def test_content_types_and_rates() -> None:
    assert {fmt: StreamEncoder(fmt).content_type for fmt in SUPPORTED_FORMATS} == CONTENT_TYPES
    assert StreamEncoder("opus").output_sample_rate_hz == 48000
    assert StreamEncoder("mp3").output_sample_rate_hz == SR


@pytest.mark.parametrize("fmt", LOSSY)
def test_bit_rate_reaches_the_codec(fmt: str, signal: np.ndarray) -> None:
    """``bit_rate_kbps`` (the server's ``*_bit_rate_kbps`` settings) changes what comes out, streamed and one-shot.

    Only LAME is close to constant bit rate; libopus is VBR (plus Ogg pages) and FFmpeg's
    AAC encoder spends what the signal needs, so for those only the ordering is checked.
    """
    duration_s = signal.size / SR
    streamed = {kbps: b"".join(_encode_streamed_at(signal, fmt, kbps)) for kbps in (16, 64)}
    oneshot = {kbps: encode_audio(signal, fmt, bit_rate_kbps=kbps) for kbps in (16, 64)}
    for sizes in (streamed, oneshot):
        assert len(sizes[16]) < 0.6 * len(sizes[64]), (fmt, {k: len(v) for k, v in sizes.items()})
    if fmt == "mp3":
        assert 0.9 * 64 < len(oneshot[64]) * 8 / duration_s / 1000 < 1.1 * 64
    assert StreamEncoder(fmt).bit_rate_kbps == DEFAULT_BIT_RATES_KBPS[fmt]
    low, high = BIT_RATE_RANGES_KBPS[fmt]
    for bad in (low - 1, high + 1):
        with pytest.raises(InvalidInputError, match=f"{fmt} bit rate must be {low}-{high} kbit/s"):
            StreamEncoder(fmt, bit_rate_kbps=bad)
    assert StreamEncoder("wav", bit_rate_kbps=64).bit_rate_kbps is None  # lossless formats ignore it


def _encode_streamed_at(pcm: np.ndarray, fmt: str, bit_rate_kbps: int) -> list[bytes]:
    encoder = StreamEncoder(fmt, bit_rate_kbps=bit_rate_kbps)
    return [encoder.encode(chunk) for chunk in _uneven_chunks(pcm)] + [encoder.finish()]


def test_bad_input_raises_helpful_errors() -> None:
    with pytest.raises(InvalidInputError, match="use one of"):
        StreamEncoder("ogg")
    with pytest.raises(InvalidInputError, match="mono"):
        encode_audio(np.zeros((2, 100), dtype=np.float32), "wav")
    encoder = StreamEncoder("mp3")
    encoder.finish()
    with pytest.raises(TurboTTSError, match="new"):
        encoder.encode(np.zeros(10, dtype=np.float32))


def test_close_without_finish_is_safe() -> None:
    encoder = StreamEncoder("opus")
    encoder.encode(np.zeros(2400, dtype=np.float32))
    encoder.close()
    encoder.close()
