"""Time stretch (duration, pitch, streaming), the speed mapping, crossfades and segment joining."""

from __future__ import annotations

import math

import numpy as np
import pytest

from turbotts.errors import InvalidInputError, TurboTTSError
from turbotts.server.audio.effects import (
    SegmentJoiner,
    StreamTimeStretcher,
    crossfade,
    split_speed,
    time_stretch,
)

SR = 24000


def _tone(freq_hz: float = 440.0, duration_s: float = 2.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(round(duration_s * SR)) / SR
    return (amplitude * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


def _dominant_frequency_hz(pcm: np.ndarray) -> float:
    """Peak of a heavily zero-padded, windowed spectrum (resolution well under 1 Hz)."""
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(pcm.size), n=2**19))
    return float(np.argmax(spectrum) * SR / 2**19)


def _rms(pcm: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(pcm, dtype=np.float64))))


def _stream(stretcher: StreamTimeStretcher, pcm: np.ndarray, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bounds = np.sort(rng.integers(1, pcm.size, size=12))
    return np.concatenate([stretcher.process(c) for c in np.split(pcm, bounds)] + [stretcher.flush()])


@pytest.mark.parametrize("rate", [0.25, 0.5, 1.5, 4.0])
def test_time_stretch_changes_duration_and_keeps_pitch(rate: float) -> None:
    tone = _tone()
    out = time_stretch(tone, rate)
    assert out.dtype == np.float32
    assert out.size == round(tone.size / rate)
    assert abs(_dominant_frequency_hz(out) - 440.0) < 3.0
    # The tone runs to the end (atempo only fades its last window): the length is not
    # made up by padding silence.
    assert _rms(out[-out.size // 20 :]) > 0.8 * _rms(tone)
    assert np.nonzero(np.abs(out) > 0.05)[0][-1] >= out.size - 0.025 * SR


@pytest.mark.parametrize("rate", [0.25, 0.7, 3.0])
def test_streamed_stretch_matches_expected_duration(rate: float) -> None:
    tone = _tone(duration_s=1.5)
    out = _stream(StreamTimeStretcher(rate), tone)
    assert abs(out.size - tone.size / rate) <= 0.002 * SR
    assert abs(_dominant_frequency_hz(out) - 440.0) < 3.0


def test_streamed_stretch_emits_before_flush() -> None:
    stretcher = StreamTimeStretcher(1.5)
    first = stretcher.process(_tone(duration_s=0.5))
    assert first.size > 0.5 * (0.5 * SR / 1.5)
    stretcher.flush()
    with pytest.raises(TurboTTSError, match="new one"):
        stretcher.process(first)


def test_rate_one_is_identity() -> None:
    tone = _tone(duration_s=0.3)
    np.testing.assert_array_equal(time_stretch(tone, 1.0), tone)


@pytest.mark.parametrize("rate", [0.2, 4.5, float("nan")])
def test_out_of_range_rate_raises(rate: float) -> None:
    with pytest.raises(InvalidInputError, match="between"):
        time_stretch(_tone(duration_s=0.1), rate)


def test_split_speed_normal_speed_changes_nothing() -> None:
    assert split_speed(1.0) == (5, 1.0)
    assert split_speed(1.0, use_prompt=False) == (None, 1.0)
    assert split_speed(2.5, use_prompt=False) == (None, 2.5)


@pytest.mark.parametrize("speed", [0.25, 0.5, 0.8, 0.9, 1.1, 1.25, 2.0, 4.0])
def test_split_speed_token_times_stretch_is_speed(speed: float) -> None:
    token, rate = split_speed(speed)
    assert token is not None and 0 <= token <= 9
    assert math.isclose(1.05 ** (token - 5) * rate, speed)
    assert 0.25 <= rate <= 4.0
    if 0.8 <= speed <= 1.25:  # the prompt does (almost) all the work
        assert abs(rate - 1.0) <= 0.03
    assert (token > 5) == (speed > 1.025) and (token < 5) == (speed < 1 / 1.025)


def test_split_speed_rejects_out_of_range() -> None:
    with pytest.raises(InvalidInputError):
        split_speed(5.0)


def test_crossfade_is_equal_power() -> None:
    ones, zeros = np.ones(480, dtype=np.float32), np.zeros(480, dtype=np.float32)
    fade_out, fade_in = crossfade(ones, zeros), crossfade(zeros, ones)
    np.testing.assert_allclose(fade_out**2 + fade_in**2, 1.0, atol=1e-5)
    assert fade_out[0] > 0.99 and fade_out[-1] < 0.01
    assert np.all(np.diff(fade_out) <= 0)


def test_crossfade_rejects_mismatched_lengths() -> None:
    with pytest.raises(InvalidInputError, match="equal lengths"):
        crossfade(np.zeros(10), np.zeros(11))


def _join(segments: list[np.ndarray], crossfade_ms: float, chunk: int = 700) -> np.ndarray:
    joiner = SegmentJoiner(crossfade_ms=crossfade_ms)
    out = []
    for segment in segments:
        out += [joiner.add(segment[i : i + chunk]) for i in range(0, segment.size, chunk)]
        out.append(joiner.end_segment())
    out.append(joiner.finish())
    return np.concatenate(out)


def test_joiner_duration_is_sum_minus_overlaps() -> None:
    segments = [_tone(220, 0.5), _tone(330, 0.3), _tone(440, 0.7)]
    out = _join(segments, crossfade_ms=20)
    assert out.size == sum(s.size for s in segments) - 2 * 480


def test_joiner_matches_offline_crossfade() -> None:
    a, b = _tone(220, 0.4), _tone(330, 0.4)
    n = 480
    expected = np.concatenate([a[:-n], crossfade(a[-n:], b[:n]), b[n:]])
    np.testing.assert_allclose(_join([a, b], crossfade_ms=20, chunk=333), expected, atol=1e-6)


def test_joiner_removes_the_click_at_a_boundary() -> None:
    high, low = np.full(SR // 2, 0.5, dtype=np.float32), np.full(SR // 2, -0.5, dtype=np.float32)
    joined = _join([high, low], crossfade_ms=20)
    plain = _join([high, low], crossfade_ms=0)
    assert plain.size == 2 * (SR // 2) and np.max(np.abs(np.diff(plain))) == pytest.approx(1.0)
    assert np.max(np.abs(np.diff(joined))) < 0.01


def test_joiner_handles_segments_shorter_than_the_crossfade() -> None:
    segments = [_tone(220, 1000 / SR), _tone(330, 100 / SR), _tone(440, 1000 / SR)]
    out = _join(segments, crossfade_ms=20, chunk=64)
    assert out.size == 2100 - 100 - 480  # the first boundary can only overlap 100 samples


def test_joiner_holds_back_only_the_crossfade() -> None:
    joiner = SegmentJoiner(crossfade_ms=20)
    assert joiner.add(_tone(duration_s=0.5)).size == SR // 2 - 480
    assert joiner.finish().size == 480
    assert SegmentJoiner().finish().size == 0
