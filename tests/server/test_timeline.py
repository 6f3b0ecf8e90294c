"""The assembler's timeline on synthetic segments: positions are sample counts of the real output."""

from __future__ import annotations

import numpy as np
import pytest

from turbotts.errors import InvalidInputError
from turbotts.server.speech.assembler import assemble_whole
from turbotts.text.utterances import Pause, Utterance

RATE_HZ = 24000
FADE = 480  # the joiner's 20 ms crossfade


def tone(num_samples: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).uniform(-0.5, 0.5, num_samples)).astype(np.float32)


def spans(captions: list) -> list[tuple[int, int]]:
    return [(c.start_sample, c.end_sample) for c in captions]


def test_crossfaded_segments_tile_the_output() -> None:
    audio, captions = assemble_whole(
        [
            ("a", Utterance("a"), tone(5000, 1)),
            ("b", Utterance("b"), tone(3000, 2)),
            ("c", Utterance("c"), tone(700, 3)),
        ],
        RATE_HZ,
    )
    assert audio.size == 5000 + 3000 + 700 - 2 * FADE
    assert spans(captions) == [(0, 5000 - FADE), (5000 - FADE, 8000 - 2 * FADE), (8000 - 2 * FADE, audio.size)]
    assert [c.index for c in captions] == [0, 1, 2] and captions[1].start_s == (5000 - FADE) / RATE_HZ


def test_a_pause_is_exact_zeros_between_captions_and_ends_the_crossfade() -> None:
    audio, captions = assemble_whole(
        [("a", Utterance("a"), tone(4000, 1)), Pause(250), ("b", Utterance("b"), tone(4000, 2)), Pause(10)], RATE_HZ
    )
    assert spans(captions) == [(0, 4000), (4000 + 6000, 14000)]
    assert not audio[4000:10000].any() and audio[3999] != 0 and audio[10000] != 0
    assert audio.size == 14000 + 240  # a trailing pause is kept too


@pytest.mark.parametrize("rate", [0.5, 2.0, 3.0])
def test_a_rate_change_is_its_own_run_of_exact_length(rate: float) -> None:
    audio, captions = assemble_whole(
        [
            ("a", Utterance("a"), tone(6000, 1)),
            ("b", Utterance("b", rate), tone(6000, 2)),
            ("c", Utterance("c"), tone(6000, 3)),
        ],
        RATE_HZ,
    )
    stretched = round(6000 / rate)
    assert spans(captions) == [(0, 6000), (6000, 6000 + stretched), (6000 + stretched, 12000 + stretched)]
    assert audio.size == 12000 + stretched


def test_the_request_rate_scales_every_position() -> None:
    audio, captions = assemble_whole(
        [("a", Utterance("a"), tone(8000, 1)), ("b", Utterance("b"), tone(8000, 2))], RATE_HZ, stretch_rate=2.0
    )
    assert audio.size == round((16000 - FADE) / 2.0)
    assert spans(captions) == [(0, round((8000 - FADE) / 2.0)), (round((8000 - FADE) / 2.0), audio.size)]


def test_a_segment_without_audio_gets_no_caption() -> None:
    _, captions = assemble_whole(
        [("a", Utterance("a"), tone(3000, 1)), ("empty", Utterance("x"), np.zeros(0, np.float32)),
         ("b", Utterance("b"), tone(3000, 2))],
        RATE_HZ,
    )  # fmt: skip
    assert [c.text for c in captions] == ["a", "b"] and spans(captions)[1][1] == 6000 - FADE


def test_speed_times_rate_outside_the_stretcher_range_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"outside 0\.25\.\.4\.0"):
        assemble_whole([("a", Utterance("a", 3.0), tone(3000, 1))], RATE_HZ, stretch_rate=2.0)
