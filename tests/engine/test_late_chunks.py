"""A late chunk: what is stable leaves early when the listener needs it, never below its minimum."""

from __future__ import annotations

import torch

from turbotts.config import StreamingConfig
from turbotts.engine.streaming import SAMPLES_PER_FRAME, AudioStream

CONFIG = StreamingConfig()  # chunks of 4, 24, 48, 96 frames; lookahead 12 (8 for the first); late chunks of 12+


def _stream_with(num_frames: int) -> AudioStream:
    stream = AudioStream("s", CONFIG, use_decoder=True, is_streaming=True)
    for _ in range(num_frames):
        stream.append([0, 0, 0, 0], torch.zeros(8))
    return stream


def _emit(stream: AudioStream, *, is_late: bool = False) -> int:
    window = stream.next_window(is_late=is_late)
    assert window is not None
    stream.mark_emitted(window)
    return (window.keep_to - window.keep_from) // SAMPLES_PER_FRAME


def test_a_late_chunk_leaves_what_is_stable_once_it_holds_the_minimum() -> None:
    stream = _stream_with(4 + 8)
    assert _emit(stream) == 4  # the first chunk
    for _ in range(11 + 4):  # 11 stable frames past the first chunk (its lookahead grows 8 -> 12): under 12
        stream.append([0, 0, 0, 0], torch.zeros(8))
    assert stream.next_window(is_late=True) is None
    assert stream.num_frames_to_late_chunk == 1
    assert stream.num_frames_to_next_chunk == 24 - 11  # the planned second chunk
    stream.append([0, 0, 0, 0], torch.zeros(8))
    assert stream.next_window() is None  # planned: 24 frames, not yet
    assert _emit(stream, is_late=True) == 12  # late: the 12 stable frames leave now


def test_the_first_chunk_is_never_cut_by_lateness() -> None:
    stream = _stream_with(4 + 8 - 1)
    assert stream.next_window(is_late=True) is None  # the first chunk waits for its own 4 frames
    assert stream.num_frames_to_late_chunk == stream.num_frames_to_next_chunk == 1


def test_late_chunks_keep_the_planned_growth_for_the_chunks_after_them() -> None:
    stream = _stream_with(4 + 8)
    _emit(stream)
    for _ in range(16 + 4):  # 16 stable frames past the first chunk
        stream.append([0, 0, 0, 0], torch.zeros(8))
    assert _emit(stream, is_late=True) == 12 + 4  # late chunk: everything stable, not just the minimum
    assert stream.num_frames_to_next_chunk == 48  # the third planned chunk is next, as before
