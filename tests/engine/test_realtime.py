"""Real-time admission without a model: the policy's capacity from step times, and the scheduler enforcing it.

No torch here (checked in a subprocess): the policy and the scheduler are plain Python.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from turbotts.config import EngineConfig
from turbotts.engine.batch import RunnerOutput
from turbotts.engine.realtime import RealtimeConfig, RealtimePolicy
from turbotts.engine.scheduler import Scheduler, SchedulerConfig
from turbotts.engine.sequence import Sequence, SequenceKind, SequenceStatus
from turbotts.errors import OverloadedError, StreamCapacityError
from turbotts.params import SamplingParams

REAL_TIME = 24000 / 512  # code frames per second at 24 kHz: 46.875
# margin 0.2: 56.25 steps/s needed, so a step may take at most 17.8 ms


def policy(**kwargs: object) -> RealtimePolicy:
    settings: dict[str, object] = {"frames_per_s": REAL_TIME, "margin": 0.2, "max_batch_size": 16, **kwargs}
    return RealtimePolicy(RealtimeConfig(**settings))  # type: ignore[arg-type]


def test_the_capacity_is_the_largest_batch_whose_steps_keep_real_time_plus_margin() -> None:
    rt = policy()
    for batch, step_s in ((1, 0.010), (2, 0.015), (4, 0.025)):
        for _ in range(10):
            rt.observe_step(batch, step_s)
    assert rt.config.min_steps_per_s == pytest.approx(56.25)
    assert rt.step_s(3) == pytest.approx(0.020)  # between two measured sizes: on the line
    assert rt.capacity == 2  # 1/0.015 = 66.7 steps/s >= 56.25; 1/0.020 = 50 < 56.25
    rt.observe_step(2, 0.030)  # a slow step moves the mean by alpha (0.1), not all the way
    assert rt.step_s(2) == pytest.approx(0.0165)
    assert rt.capacity == 2
    for _ in range(30):
        rt.observe_step(2, 0.030)
    assert rt.capacity == 1  # sustained: batch 2 is no longer real time


def test_unmeasured_sizes_take_the_neighbouring_measured_ones() -> None:
    rt = policy()
    for batch, step_s in ((2, 0.010), (3, 0.012), (4, 0.014), (6, 0.030)):
        rt.observe_step(batch, step_s)
    assert rt.step_s(1) == pytest.approx(0.010)  # below every measured size: the smallest one's time
    assert rt.step_s(5) == pytest.approx(0.022)  # on the line through the two nearest sizes, 4 and 6


def test_larger_batches_are_extrapolated_on_the_safe_side() -> None:
    rt = policy()
    rt.observe_step(1, 0.010)
    rt.observe_step(2, 0.012)
    assert [round(rt.step_s(b) or 0, 4) for b in (3, 4, 5)] == [0.014, 0.016, 0.018]
    assert rt.capacity == 4  # 16 ms -> 62.5 steps/s; 18 ms -> 55.6 < 56.25
    noisy = policy()
    noisy.observe_step(1, 0.010)
    noisy.observe_step(2, 0.009)  # noise: a larger batch measured faster
    assert noisy.step_s(6) == pytest.approx(0.010)  # the line never slopes down: the slower one holds


def test_cold_first_steps_fade_at_once_and_a_stale_pessimistic_size_is_probed_again() -> None:
    rt = policy(stale_after_steps=100)
    rt.observe_step(1, 0.050)  # the first step of a cold process: slow
    for _ in range(9):
        rt.observe_step(1, 0.005)
    assert rt.step_s(1) == pytest.approx(0.0095)  # a plain mean of the first ten, not 0.05 fading by 10 % a step
    rt.observe_step(2, 0.040)  # once, while the machine was busy: batch 2 looks far from real time
    for _ in range(50):
        rt.observe_step(1, 0.005)
    assert rt.capacity == 1  # still fresh: believed
    for _ in range(60):
        rt.observe_step(1, 0.005)
    assert rt.capacity == 2  # 110 steps old: set aside, so one more stream is probed again
    assert rt.step_s_by_batch == {1: pytest.approx(rt.step_s(1)), 2: 0.040}  # reports keep every mean


def test_a_size_unseen_for_exactly_stale_after_steps_steps_is_set_aside() -> None:
    rt = policy(stale_after_steps=10)
    rt.observe_step(1, 0.005)
    rt.observe_step(2, 0.040)  # step 2: batch 2 looks far from real time
    for _ in range(9):
        rt.observe_step(1, 0.005)
    assert rt.capacity == 1  # batch 2 last seen 9 steps ago: still believed
    rt.observe_step(1, 0.005)
    assert rt.capacity == 2  # 10 steps ago: set aside, so one more stream is probed again


def test_a_step_exactly_at_real_time_plus_margin_keeps_real_time() -> None:
    rt = RealtimePolicy(RealtimeConfig(frames_per_s=2.0, margin=0.0, max_batch_size=4))
    rt.observe_step(1, 0.5)  # 2 steps/s, exactly the 2 needed (binary-exact numbers)
    assert rt.capacity == 2  # batch 1 measured, batch 2 probed at the same pace


def test_one_measured_size_allows_one_more_stream_as_a_probe() -> None:
    fast = policy()
    fast.observe_step(1, 0.005)
    assert fast.capacity == 2 and fast.step_s(3) is None
    slow = policy()
    slow.observe_step(1, 0.030)  # 33 steps/s: not even one stream keeps real time
    assert slow.capacity == 0 and slow.admission_limit == 1  # one at a time still makes progress


def test_nothing_measured_lets_one_stream_start_and_the_override_wins() -> None:
    rt = policy()
    assert rt.capacity == 0 and rt.admission_limit == 1 and not rt.is_measured
    rt.observe_step(1, 0.0)  # not a step at all: ignored
    assert not rt.is_measured
    forced = policy(capacity_override=3)
    forced.observe_step(1, 1.0)  # hopelessly slow, but the operator said 3
    assert forced.capacity == 3 and forced.is_measured
    assert policy(capacity_override=99).capacity == 16  # never past max_batch_size


def test_queue_wait_counts_the_streams_that_must_end_first() -> None:
    rt = policy(capacity_override=2)
    rt.observe_step(2, 0.010)
    assert rt.queue_wait_s(num_running=1, num_ahead=0, expected_steps=100) == 0.0  # a place is free
    # both places taken: one stream must end; 100 steps of 10 ms each, 2 streams ending at a time
    assert rt.queue_wait_s(num_running=2, num_ahead=0, expected_steps=100) == pytest.approx(100 * 0.010 / 2)
    # 2 running + 1 ahead + this one on 2 places: 2 streams must end; 100 steps of 10 ms each, 2 at a time
    assert rt.queue_wait_s(num_running=2, num_ahead=1, expected_steps=100) == pytest.approx(2 * 100 * 0.010 / 2)
    # measured stream lengths take over from the request's bound, which counts as the first sample:
    # one short stream halves the estimate rather than replacing it
    rt.observe_finished_stream(40, expected_steps=100)
    assert rt.queue_wait_s(num_running=2, num_ahead=1, expected_steps=100) == pytest.approx(2 * 70 * 0.010 / 2)
    rt.observe_finished_stream(40, expected_steps=100)
    rt.observe_finished_stream(40, expected_steps=100)  # a plain mean so far: (100 + 3 x 40) / 4 = 55
    assert rt.queue_wait_s(num_running=2, num_ahead=1, expected_steps=100) == pytest.approx(2 * 55 * 0.010 / 2)
    for _ in range(40):
        rt.observe_finished_stream(40, expected_steps=100)
    assert rt.queue_wait_s(num_running=2, num_ahead=1, expected_steps=100) == pytest.approx(
        2 * 40 * 0.010 / 2, rel=0.02
    )


def test_queue_wait_before_any_measurement_assumes_steps_just_at_real_time() -> None:
    rt = policy(capacity_override=2)  # nothing measured: a step is taken to last 1 / 56.25 s
    assert rt.queue_wait_s(num_running=2, num_ahead=1, expected_steps=100) == pytest.approx(2 * 100 / 56.25 / 2)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"frames_per_s": 0.0}, "frames_per_s"),
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"margin": -0.1}, "margin"),
        ({"max_queue_wait_s": -1.0}, "max_queue_wait_s"),
        ({"capacity_override": -1}, "capacity_override"),
        ({"ewma_alpha": 0.0}, "ewma_alpha"),
        ({"ewma_alpha": 1.5}, "ewma_alpha"),
    ],
)
def test_bad_policy_settings_are_refused_naming_the_setting(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        policy(**kwargs)


def test_the_edges_of_the_policy_settings_are_accepted() -> None:
    edges = RealtimeConfig(frames_per_s=0.5, margin=0.0, max_batch_size=1, capacity_override=0, ewma_alpha=1.0)
    assert RealtimePolicy(edges).capacity == 0  # an operator may switch streams to one at a time


@pytest.mark.parametrize(
    "kwargs", [{"admission": "fifo"}, {"realtime_margin": -1.0}, {"realtime_capacity_override": -2}]
)
def test_bad_engine_admission_settings_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        EngineConfig(**kwargs)  # type: ignore[arg-type]


# -- the scheduler -------------------------------------------------------------------------


def scheduler(capacity: int, *, is_enforced: bool = True, max_queue_wait_s: float = 0.0) -> Scheduler:
    config = SchedulerConfig(
        max_batch_size=8, max_waiting=64, num_slots=8, max_seq_len=512, max_prefill_tokens=4096,
        audio_eos_id=625, text_eos_id=0, is_realtime_admission=is_enforced,
    )  # fmt: skip
    rt = RealtimePolicy(
        RealtimeConfig(REAL_TIME, max_batch_size=8, max_queue_wait_s=max_queue_wait_s, capacity_override=capacity)
    )
    return Scheduler(config, rt)


_ids = iter(range(1, 10_000))


def seq(*, is_realtime: bool, max_new_tokens: int = 100) -> Sequence:
    sampling = SamplingParams(max_new_tokens=max_new_tokens)
    return Sequence(next(_ids), SequenceKind.CODE, [1, 2, 3], sampling, seed=0, is_realtime=is_realtime)


def started(s: Scheduler) -> int:
    """One step: how many sequences the scheduler prefilled (each then samples a token)."""
    work = s.schedule()
    items = [*work.prefill, *work.decode]
    s.update(RunnerOutput([i.seq_id for i in items], [[7, 7, 7, 7] for _ in items]))
    return len(work.prefill)


def test_streams_start_only_within_the_capacity_and_the_rest_wait() -> None:
    s = scheduler(capacity=2)
    streams = [seq(is_realtime=True) for _ in range(5)]
    for stream in streams:
        s.add(stream)
    assert started(s) == 2 and started(s) == 0
    assert [x.status for x in streams] == [SequenceStatus.RUNNING] * 2 + [SequenceStatus.WAITING] * 3
    s.abort(streams[0])  # one ends: exactly one more starts
    assert started(s) == 1 and s.num_running == 2 and s.num_waiting == 2


def test_batch_work_fills_spare_capacity_but_never_slows_a_running_stream() -> None:
    s = scheduler(capacity=2)
    batch = [seq(is_realtime=False) for _ in range(6)]
    for item in batch:
        s.add(item)
    assert started(s) == 6  # no stream runs: batch work may fill up to max_batch_size (8)
    stream = seq(is_realtime=True)
    s.add(stream)
    assert started(s) == 0  # 6 running already: a stream would not keep real time
    for item in batch[:5]:
        s.abort(item)
    assert started(s) == 1 and stream.status is SequenceStatus.RUNNING  # 1 batch + 1 stream = capacity
    s.add(seq(is_realtime=False))
    assert started(s) == 0  # the stream runs at capacity: batch work waits too


def test_with_admission_off_streams_start_first_come_first_served_up_to_the_batch_limit() -> None:
    s = scheduler(capacity=1, is_enforced=False, max_queue_wait_s=0.001)
    for _ in range(10):
        s.add(seq(is_realtime=True))  # never refused either
    assert started(s) == 8 and s.num_waiting == 2


def test_a_stream_that_would_wait_past_max_queue_wait_s_is_refused_with_a_retry_time() -> None:
    s = scheduler(capacity=1, max_queue_wait_s=1.0)
    s.realtime.observe_step(1, 0.010)  # type: ignore[union-attr]
    s.add(seq(is_realtime=True, max_new_tokens=50))  # the one place: no wait
    s.add(seq(is_realtime=True, max_new_tokens=50))  # waits for one stream: 50 steps x 10 ms = 0.5 s
    s.add(seq(is_realtime=True, max_new_tokens=50))  # waits for two: 1.0 s, not past 1 s
    with pytest.raises(StreamCapacityError) as refused:
        s.add(seq(is_realtime=True, max_new_tokens=50))  # waits for three: 1.5 s > 1 s
    error = refused.value
    assert isinstance(error, OverloadedError) and error.reason == "realtime"
    assert error.retry_after_s == pytest.approx(0.5)
    assert "max_queue_wait_s=1" in str(error) and s.num_refused_realtime == 1
    s.add(seq(is_realtime=False, max_new_tokens=50))  # batch work is never refused for its wait
    assert s.num_waiting == 4


def test_the_policy_and_the_scheduler_import_no_torch() -> None:
    code = "import sys, turbotts.engine.scheduler, turbotts.engine.realtime; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
