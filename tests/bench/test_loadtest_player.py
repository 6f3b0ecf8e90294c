"""The simulated listener and the decoders behind ``turbotts loadtest``, as pure functions on hand-made input."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from turbotts.bench.loadtest_audio import (
    PCM_SAMPLE_RATE_HZ,
    ByteArrival,
    SseAudioParser,
    decode_timeline,
)
from turbotts.bench.loadtest_player import AudioArrival, simulate_playback
from turbotts.errors import AudioReadError
from turbotts.server.audio.encoding import StreamEncoder

A = AudioArrival


def test_chunks_that_arrive_before_the_buffer_empties_never_stall() -> None:
    # 1 s of audio, then a 0.9 s gap: the listener still has 0.1 s left when more comes
    playback = simulate_playback([A(0.2, 1.0), A(1.1, 2.0), A(2.0, 3.0)])
    assert playback.start_s == 0.2
    assert playback.num_stalls == 0 and playback.total_stall_s == 0.0
    assert playback.is_continuous


def test_each_stall_is_the_time_between_running_dry_and_the_next_chunk() -> None:
    # plays 0.5 s from t=1 (dry at 1.5), next chunk at 2.0: 0.5 s stall; then 0.5 s more, dry at 2.5, next at 2.6
    playback = simulate_playback([A(1.0, 0.5), A(2.0, 1.0), A(2.6, 1.5)])
    assert playback.num_stalls == 2
    assert playback.max_stall_s == pytest.approx(0.5)
    assert playback.total_stall_s == pytest.approx(0.6)
    assert not playback.is_continuous


def test_small_gaps_add_up_when_each_chunk_is_shorter_than_the_gap() -> None:
    # 0.2 s chunks every 0.3 s: small gaps, yet a 0.1 s stall at every chunk
    timeline = [A(0.3 * i, 0.2 * (i + 1)) for i in range(5)]
    playback = simulate_playback(timeline)
    assert playback.num_stalls == 4
    assert playback.total_stall_s == pytest.approx(0.4)
    assert playback.max_stall_s == pytest.approx(0.1)


def test_a_startup_buffer_trades_a_later_start_for_fewer_stalls() -> None:
    timeline = [A(1.0, 0.5), A(2.0, 1.0), A(2.6, 1.5)]
    buffered = simulate_playback(timeline, prebuffer_s=1.0)  # waits for the second chunk
    assert buffered.start_s == 2.0
    assert buffered.num_stalls == 0
    # a buffer longer than the whole stream starts once everything is in
    assert simulate_playback(timeline, prebuffer_s=10.0).start_s == 2.6


def test_chunks_without_audio_do_not_start_the_player() -> None:
    # a WAV header alone (0 s of audio) at t=0.1
    playback = simulate_playback([A(0.1, 0.0), A(0.4, 1.0)])
    assert playback.start_s == 0.4 and playback.num_stalls == 0
    assert simulate_playback([]).start_s is None
    assert not simulate_playback([A(0.1, 0.0)]).is_continuous


@pytest.mark.parametrize("timeline", [[A(1.0, 1.0), A(0.5, 2.0)], [A(0.0, 2.0), A(1.0, 1.0)]])
def test_a_timeline_out_of_order_is_refused(timeline: list[AudioArrival]) -> None:
    with pytest.raises(ValueError, match="in order"):
        simulate_playback(timeline)
    with pytest.raises(ValueError, match="prebuffer_s"):
        simulate_playback([], prebuffer_s=-1)


def _tone(seconds: float, rate_hz: int = 24000) -> np.ndarray:
    return (0.3 * np.sin(np.arange(int(seconds * rate_hz)) * 0.05)).astype(np.float32)


def test_pcm_and_wav_count_samples_at_each_arrival() -> None:
    pcm = b"\x00\x01" * PCM_SAMPLE_RATE_HZ  # 1 s
    decoded = decode_timeline("pcm", pcm, [ByteArrival(0.1, 24000), ByteArrival(0.3, 48000)])
    assert decoded.duration_s == pytest.approx(1.0)
    assert [a.audio_s for a in decoded.arrivals] == [pytest.approx(0.5), pytest.approx(1.0)]
    encoder = StreamEncoder("wav", 16000)
    first = encoder.encode(_tone(0.5, 16000))
    body = first + encoder.encode(_tone(0.25, 16000)) + encoder.finish()
    decoded = decode_timeline(
        "wav", body, [ByteArrival(0.1, 44), ByteArrival(0.2, len(first)), ByteArrival(0.3, len(body))]
    )
    assert [a.audio_s for a in decoded.arrivals] == [0.0, pytest.approx(0.5), pytest.approx(0.75)]
    with pytest.raises(AudioReadError):
        decode_timeline("wav", b"not a wav file at all", [])


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac"])
def test_compressed_streams_are_decoded_and_never_ahead_of_their_bytes(fmt: str) -> None:
    encoder = StreamEncoder(fmt)
    first = encoder.encode(_tone(1.0))
    body = first + encoder.encode(_tone(1.0)) + encoder.finish()
    arrivals = [ByteArrival(0.0, len(first)), ByteArrival(1.5, len(body))]
    decoded = decode_timeline(fmt, body, arrivals)
    assert decoded.duration_s == pytest.approx(2.0, abs=0.1)  # codec priming and padding, decoded
    half, whole = (a.audio_s for a in decoded.arrivals)
    assert 0.5 < half <= 1.05  # the first part's audio, less what the encoder still held back
    assert whole == pytest.approx(decoded.duration_s)
    # whatever arrives, nothing is playable from a prefix shorter than the first packet
    assert decode_timeline(fmt, body, [ByteArrival(0.0, 10)]).arrivals[0].audio_s == 0.0


def test_sse_events_are_unwrapped_even_when_split_across_reads() -> None:
    events = b"".join(
        b"data: " + json.dumps(e).encode() + b"\n\n"
        for e in (
            {"type": "speech.audio.delta", "audio": base64.b64encode(b"\x01\x02\x03\x04").decode()},
            {"type": "speech.audio.delta", "audio": base64.b64encode(b"\x05\x06").decode()},
            {"type": "speech.audio.done", "usage": {}},
        )
    )
    parser = SseAudioParser()
    audio = b"".join(parser.feed(events[i : i + 7]) for i in range(0, len(events), 7))
    assert audio == b"\x01\x02\x03\x04\x05\x06" and parser.is_done and parser.error_code is None
    failing = SseAudioParser()
    failing.feed(b'data: {"type": "error", "error": {"message": "m", "code": "engine_error"}}\n\n')
    assert failing.error_code == "engine_error" and not failing.is_done
