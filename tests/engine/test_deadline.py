"""The deadline policy as plain data: slack, row choice, and the capacity admission shares with it."""

from __future__ import annotations

import pytest

from turbotts.engine.deadline import (
    DeadlineConfig,
    PlaybackClock,
    RowSlack,
    StepCost,
    choose_rows,
    is_chunk_late,
    slack_s,
    streams_kept,
)
from turbotts.engine.realtime import RealtimeConfig, RealtimePolicy

FRAMES_PER_S = 24000 / 512  # 46.875
BUDGET_S = 1 / (FRAMES_PER_S * 1.2)  # real time plus a 20 % margin: 17.8 ms
CONFIG = DeadlineConfig(step_budget_s=BUDGET_S, min_slack_s=0.15)
#: a CPU whose step grows with the batch: 1 row at half the budget, 2 at 0.8, 3 over it
GROWING = StepCost({1: 0.5 * BUDGET_S, 2: 0.8 * BUDGET_S, 3: 1.3 * BUDGET_S, 4: 1.7 * BUDGET_S})


def test_a_row_about_to_underrun_runs_and_one_far_ahead_sits_out() -> None:
    rows = [RowSlack(1, 4.0), RowSlack(2, 0.05), RowSlack(3, 2.0)]
    chosen = choose_rows(rows, GROWING, CONFIG)
    assert chosen == [2, 3]  # the two nearest their deadlines; the 4 s-ahead row sits out
    assert 1 not in chosen


def test_every_row_runs_while_they_all_fit_a_real_time_step() -> None:
    rows = [RowSlack(1, 4.0), RowSlack(2, 0.5)]
    assert sorted(choose_rows(rows, GROWING, CONFIG)) == [1, 2]


def test_rows_under_the_minimum_slack_never_sit_out() -> None:
    rows = [RowSlack(1, 0.1), RowSlack(2, 0.05), RowSlack(3, 0.12), RowSlack(4, 3.0)]
    chosen = choose_rows(rows, GROWING, CONFIG)
    assert chosen == [2, 1, 3]  # three urgent rows run although only two fit the budget; the far one waits


def test_the_batch_size_with_the_most_frames_per_second_is_chosen() -> None:
    """A kernel cliff: 3 rows cost barely more than 2, 4 rows twice as much."""
    cliff = StepCost({1: 0.6 * BUDGET_S, 2: 0.62 * BUDGET_S, 3: 0.64 * BUDGET_S, 4: 1.9 * BUDGET_S})
    rows = [RowSlack(1, 0.3), *(RowSlack(i, 1.0 + i) for i in range(2, 6))]
    assert choose_rows(rows, cliff, CONFIG) == [1, 2, 3]


def test_a_batch_just_over_the_budget_runs_whole_when_it_makes_the_most_frames() -> None:
    """A CPU's step: 3 rows cost 1.1 budgets, 2 rows 0.9: the 3-row step makes 2.7 frames a budget
    against 2.2, so a listener short of slack is no reason for anyone to sit out (measured: capping
    the batch at the budget lost a third of the frames on a 2-core CPU)."""
    cpu = StepCost({1: 0.7 * BUDGET_S, 2: 0.9 * BUDGET_S, 3: 1.1 * BUDGET_S})
    rows = [RowSlack(1, 4.0), RowSlack(2, 0.3), RowSlack(3, 2.0)]
    assert choose_rows(rows, cpu, CONFIG) == [2, 3, 1]


def test_nobody_sits_out_while_no_stream_is_short_of_slack() -> None:
    """Over the real-time batch, but every listener holds more than rescue_slack_s: the biggest batch runs."""
    rows = [RowSlack(1, 4.0), RowSlack(2, 0.8), RowSlack(3, 2.0)]
    assert choose_rows(rows, GROWING, CONFIG) == [2, 3, 1]
    rows[1] = RowSlack(2, 0.4)  # one listener is short now: the far one sits out for it
    assert choose_rows(rows, GROWING, CONFIG) == [2, 3]


def test_a_newcomer_goes_first_but_alone_makes_nobody_sit_out() -> None:
    rows = [RowSlack(1, 4.0), RowSlack(2, 0.8), RowSlack(3, -0.2, is_first_chunk=True)]
    assert choose_rows(rows, GROWING, CONFIG) == [3, 2, 1]
    rows[1] = RowSlack(2, 0.3)  # a playing listener short of slack: now the far one sits out
    assert choose_rows(rows, GROWING, CONFIG) == [3, 2]


def test_batch_work_fills_only_what_the_budget_leaves() -> None:
    rows = [RowSlack(1, 2.0), RowSlack(9, None), RowSlack(10, None)]
    assert choose_rows(rows, GROWING, CONFIG) == [1, 9]  # 2 rows fit the budget, 3 do not


def test_without_streams_or_step_times_every_row_runs() -> None:
    rows = [RowSlack(1, None), RowSlack(2, None)]
    assert choose_rows(rows, GROWING, CONFIG) == [1, 2]
    unknown = StepCost({})
    assert sorted(choose_rows([RowSlack(1, 3.0), RowSlack(2, 0.2)], unknown, CONFIG)) == [1, 2]


def test_a_newcomers_first_chunk_is_due_on_arrival() -> None:
    clock = PlaybackClock(buffer_s=1.0, arrival_s=10.0, num_frames_to_next_chunk=12)
    assert slack_s(clock, now_s=10.2, step_s=0.02) == pytest.approx(-0.2 - 12 * 0.02)
    playing = PlaybackClock(buffer_s=1.0, arrival_s=0.0)
    playing.observe(now_s=9.0, first_audio_s=8.0, emitted_audio_s=1.5, num_frames=0)
    rows = [RowSlack(1, slack_s(playing, 10.2, 0.02)), RowSlack(2, slack_s(clock, 10.2, 0.02), is_first_chunk=True)]
    assert choose_rows(rows, GROWING, CONFIG)[0] == 2  # the newcomer before the stream already playing


def test_slack_while_playing_is_audio_sent_minus_time_played() -> None:
    clock = PlaybackClock(buffer_s=1.0, arrival_s=0.0)
    clock.observe(now_s=2.0, first_audio_s=2.0, emitted_audio_s=0.5, num_frames=0)
    assert clock.playing_since_s is None  # half the buffer: the player waits, due to start by 3.0
    assert slack_s(clock, now_s=2.4, step_s=0.02) == pytest.approx(3.0 - 2.4)
    clock.observe(now_s=2.5, first_audio_s=2.0, emitted_audio_s=1.2, num_frames=0)
    assert clock.playing_since_s == 2.5  # the buffer is full: the player starts
    clock.observe(now_s=3.0, first_audio_s=2.0, emitted_audio_s=3.0, num_frames=0)
    assert slack_s(clock, now_s=4.0, step_s=0.02) == pytest.approx(2.5 + 3.0 - 4.0)
    clock.observe(now_s=4.0, first_audio_s=2.0, emitted_audio_s=3.0, num_frames=24)
    assert slack_s(clock, now_s=4.0, step_s=0.02) == pytest.approx(1.5 - 24 * 0.02)  # 24 steps to its next chunk


def test_a_chunk_is_late_only_for_a_playing_listener_about_to_run_dry() -> None:
    clock = PlaybackClock(buffer_s=1.0, arrival_s=0.0)
    assert not is_chunk_late(clock, now_s=5.0, margin_s=0.3)  # no audio yet: the first chunk is small already
    clock.observe(now_s=1.0, first_audio_s=1.0, emitted_audio_s=0.6, num_frames=48)
    assert not is_chunk_late(clock, now_s=1.95, margin_s=0.3)  # not playing yet: the planned chunks start it
    clock.observe(now_s=1.5, first_audio_s=1.0, emitted_audio_s=1.6, num_frames=96)  # playing since 1.5, dry at 3.1
    assert not is_chunk_late(clock, now_s=2.7, margin_s=0.3)  # 0.4 s left
    assert is_chunk_late(clock, now_s=2.85, margin_s=0.3)  # 0.25 s left: what is made leaves now
    assert is_chunk_late(clock, now_s=3.5, margin_s=0.3)  # dry already


def test_rotating_batches_keep_more_streams_than_the_largest_real_time_batch() -> None:
    cliff = StepCost({1: 0.3 * BUDGET_S, 2: 0.32 * BUDGET_S, 3: 0.34 * BUDGET_S, 4: 1.9 * BUDGET_S})
    per_stream = FRAMES_PER_S * 1.2
    assert streams_kept(cliff, 16, per_stream) == 8  # 3 rows per 0.34 budget: 8.8 streams' worth
    assert streams_kept(GROWING, 16, per_stream) == 2
    assert streams_kept(cliff, 5, per_stream) == 5  # sitting-out rows still hold a KV slot


def _policy(is_deadline: bool) -> RealtimePolicy:
    policy = RealtimePolicy(RealtimeConfig(FRAMES_PER_S, max_batch_size=16, is_deadline_scheduling=is_deadline))
    for batch, share in ((1, 0.3), (2, 0.32), (3, 0.34), (4, 1.9)):
        for _ in range(3):
            policy.observe_step(batch, share * BUDGET_S)
    return policy


def test_admission_counts_the_streams_the_deadline_policy_keeps() -> None:
    assert _policy(is_deadline=False).capacity == 3
    assert _policy(is_deadline=True).capacity == 8


def test_the_vocoder_cost_per_frame_adds_to_every_row_of_a_step() -> None:
    policy = _policy(is_deadline=False)
    policy.observe_vocoder(num_frames=10, duration_s=10 * 0.3 * BUDGET_S)
    assert policy.step_s(3) == pytest.approx((0.34 + 3 * 0.3) * BUDGET_S)
    assert policy.capacity == 2  # 3 rows no longer fit once their vocoding is counted
    assert policy.step_cost(4).step_s(2) == pytest.approx(policy.step_s(2))


def test_the_vocoder_cost_per_frame_weighs_calls_by_their_frames() -> None:
    """A first chunk (4 frames, 12 ms) and a large one (96 frames, 96 ms): 108 ms for 100 frames,
    not the mean of 3 and 1 ms a frame, which would make every stream look twice as dear."""
    policy = RealtimePolicy(RealtimeConfig(FRAMES_PER_S, ewma_alpha=0.5))
    policy.observe_step(1, 0.01)
    policy.observe_vocoder(num_frames=4, duration_s=0.012)
    policy.observe_vocoder(num_frames=96, duration_s=0.096)
    assert policy.step_s(1) == pytest.approx(0.01 + 0.108 / 100)
