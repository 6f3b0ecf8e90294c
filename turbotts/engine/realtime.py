"""Real-time admission: how many streams this engine can keep at or above real time (no torch here).

Why: a stream is only useful if its audio arrives at least as fast as it plays. One
engine step decodes every running sequence together and gives each one **code
frame** (the 4 VQ codes of one GPT step: 2 mel frames of 256 samples = 512 samples
= 21.3 ms at 24 kHz), so a stream plays in real time while the engine makes at least
``24000 / 512 = 46.875`` steps per second, whatever the batch. The step gets slower
as the batch grows, so there is a largest batch that still keeps that pace: the
*real-time capacity*. Past it, adding one more stream stalls every stream.

The capacity is learned, not configured: the engine core reports the wall time of
every pure decode step (no prefill in it; the vocoder work of that step included,
because a listener waits for it too), and this policy keeps an exponentially weighted
mean of step seconds per batch size. A batch size never run is estimated from the
measured ones: between two measured sizes by a straight line; above the largest
measured size by the line through the two largest (step time grows less than
linearly with the batch on CPU and GPU, so that line over-estimates: it errs on the
safe side); with one measured size only, one more stream is allowed as a probe, and
its first steps give the second point. With nothing measured yet one stream may start.

A size's first samples are averaged plainly (weight ``max(alpha, 1/n)``), so the slow first
steps of a cold process fade at once instead of over dozens of steps. A size not run for
``stale_after_steps`` steps is set aside while fresher ones exist, so an old pessimistic
sample above the capacity cannot hold it down for ever: the rules above then probe it again.

The vocoder's share is learned apart, as seconds per code frame (the engine core times its
decode calls): a step of ``b`` rows costs the GPT step at ``b`` plus ``b`` frames of vocoding,
which is what the steady state pays. With deadline scheduling (:mod:`turbotts.engine.deadline`)
the capacity counts the streams that rotating real-time batches keep at real time, the same
model the scheduler chooses rows with.

``capacity_override`` replaces the learned value (tests, and operators who measured
it themselves).
"""

from __future__ import annotations

from dataclasses import dataclass

from turbotts.config import EngineConfig
from turbotts.engine.deadline import StepCost, streams_kept

#: code frames one GPT step gives each running sequence
FRAMES_PER_STEP = 1


@dataclass(frozen=True)
class RealtimeConfig:
    """What real time means for this model and how much headroom to keep.

    Args:
        frames_per_s: code frames one stream plays per second (sample rate / samples per code frame).
        margin: required headroom: steps/s x frames per step >= frames_per_s x (1 + margin).
        max_batch_size: the engine's batch limit (capacity never exceeds it).
        max_queue_wait_s: refuse a new stream whose estimated queue wait is longer; 0 = never refuse.
        capacity_override: a fixed capacity instead of the learned one.
        ewma_alpha: weight of the newest step in the mean step time.
        stale_after_steps: steps after which a batch size's mean is set aside (fresher sizes exist).
        is_deadline_scheduling: rows may sit out steps (deadline scheduling): capacity counts the
            streams rotating real-time batches keep, not only the largest real-time batch.
    """

    frames_per_s: float
    margin: float = 0.2
    max_batch_size: int = 16
    max_queue_wait_s: float = 30.0
    capacity_override: int | None = None
    ewma_alpha: float = 0.1
    stale_after_steps: int = 1000
    is_deadline_scheduling: bool = False

    def __post_init__(self) -> None:
        if self.frames_per_s <= 0 or self.max_batch_size < 1:
            raise ValueError("frames_per_s and max_batch_size must be positive")
        if self.margin < 0 or self.max_queue_wait_s < 0:
            raise ValueError("realtime margin and max_queue_wait_s cannot be negative")
        if self.capacity_override is not None and self.capacity_override < 0:
            raise ValueError("realtime_capacity_override cannot be negative")
        if not 0 < self.ewma_alpha <= 1:
            raise ValueError("ewma_alpha must lie in (0, 1]")

    @property
    def min_steps_per_s(self) -> float:
        """Steps per second every running stream needs: real time plus the margin."""
        return self.frames_per_s * (1 + self.margin) / FRAMES_PER_STEP


class RealtimePolicy:
    """Mean step time by batch size -> real-time capacity -> may a stream start, how long would it wait."""

    def __init__(self, config: RealtimeConfig) -> None:
        self.config = config
        self._step_s: dict[int, float] = {}  # batch size -> EWMA of step seconds
        self._num_samples: dict[int, int] = {}
        self._last_seen: dict[int, int] = {}  # batch size -> index of the step that last measured it
        self._num_steps = 0
        self._stream_steps: float | None = None  # EWMA of steps a finished stream ran
        self._num_streams = 0
        self._vocoder_s = 0.0  # EWMA of a vocoder call's seconds ...
        self._vocoder_frames = 0.0  # ... and of the frames it made: their ratio weighs calls by frames
        self._num_vocoder_samples = 0

    # -- measurements -----------------------------------------------------------------

    def observe_step(self, batch_size: int, duration_s: float) -> None:
        """One pure decode step of ``batch_size`` sequences took ``duration_s``."""
        if batch_size < 1 or duration_s <= 0:
            return
        self._num_steps += 1
        num = self._num_samples.get(batch_size, 0) + 1
        self._num_samples[batch_size] = num
        self._last_seen[batch_size] = self._num_steps
        old = self._step_s.get(batch_size, 0.0)
        alpha = max(self.config.ewma_alpha, 1.0 / num)
        self._step_s[batch_size] = old + alpha * (duration_s - old)

    def observe_vocoder(self, num_frames: int, duration_s: float) -> None:
        """The vocoder made ``num_frames`` code frames' audio in ``duration_s``.

        The cost per frame is seconds over frames of recent calls, not a mean of each call's ratio:
        a first chunk (4 frames kept of 12 decoded) costs three times a large chunk per frame, and
        counted as one call in a mean of ratios it would make every stream look that dear.
        """
        if num_frames < 1 or duration_s <= 0:
            return
        self._num_vocoder_samples += 1
        alpha = max(self.config.ewma_alpha, 1.0 / self._num_vocoder_samples)
        self._vocoder_s += alpha * (duration_s - self._vocoder_s)
        self._vocoder_frames += alpha * (num_frames - self._vocoder_frames)

    @property
    def _vocoder_s_per_frame(self) -> float:
        return self._vocoder_s / self._vocoder_frames if self._vocoder_frames > 0 else 0.0

    def observe_finished_stream(self, num_steps: int, expected_steps: int) -> None:
        """A stream ended after ``num_steps`` decode steps (its length, for queue-wait estimates).

        The request's own bound (``expected_steps``) counts as the first sample, then a plain
        mean until the EWMA weighs more: one short first stream (a warm-up, a one-word request)
        halves the estimate instead of replacing it, so the engine does not go on to promise a
        queue of listeners slots it cannot keep.
        """
        self._num_streams += 1
        old = float(expected_steps) if self._stream_steps is None else self._stream_steps
        alpha = max(self.config.ewma_alpha, 1.0 / (self._num_streams + 1))
        self._stream_steps = old + alpha * (num_steps - old)

    @property
    def step_s_by_batch(self) -> dict[int, float]:
        """The measured means, smallest batch first (for reports)."""
        return dict(sorted(self._step_s.items()))

    @property
    def is_measured(self) -> bool:
        return self.config.capacity_override is not None or bool(self._step_s)

    # -- estimates ----------------------------------------------------------------------

    def step_s(self, batch_size: int) -> float | None:
        """Estimated seconds of one step at ``batch_size`` with its vocoding; None when nothing supports a guess."""
        gpt = self.gpt_step_s(batch_size)
        return None if gpt is None else gpt + batch_size * self._vocoder_s_per_frame

    def step_cost(self, max_batch_size: int) -> StepCost:
        """The estimates for sizes 1..``max_batch_size`` as plain data (for the deadline policy)."""
        means = self._fresh_means()
        sizes = {b: _estimate(means, b) for b in range(1, max_batch_size + 1)}
        known = {b: s for b, s in sizes.items() if s is not None}
        return StepCost(known, self._vocoder_s_per_frame)

    @property
    def step_budget_s(self) -> float:
        """The real-time step: every running stream gets a frame this often at real time plus margin."""
        return 1.0 / self.config.min_steps_per_s

    @property
    def realtime_step_s(self) -> float:
        """The longest step that keeps every running stream at real time exactly (no margin): the pace
        the deadline policy assumes for a row's next frames before any step of its batch was measured."""
        return FRAMES_PER_STEP / self.config.frames_per_s

    def gpt_step_s(self, batch_size: int) -> float | None:
        """Estimated seconds of one GPT step at ``batch_size``; None when nothing supports a guess."""
        return _estimate(self._fresh_means(), batch_size)

    def _fresh_means(self) -> dict[int, float]:
        """The means of sizes measured in the last ``stale_after_steps`` steps (all of them if none is)."""
        horizon = self._num_steps - self.config.stale_after_steps
        fresh = {b: s for b, s in self._step_s.items() if self._last_seen[b] > horizon}
        return fresh or self._step_s

    def is_realtime_at(self, batch_size: int) -> bool:
        step_s = self.step_s(batch_size)
        return step_s is not None and 1.0 / step_s >= self.config.min_steps_per_s

    @property
    def capacity(self) -> int:
        """Streams kept at real time plus margin; 0 if none.

        FIFO: the largest batch whose (estimated) steps keep every row at real time. Deadline
        scheduling: at least that, or the streams that rotating real-time batches keep, counted
        from measured sizes only (a probe's guess never raises it).
        """
        if self.config.capacity_override is not None:
            return min(self.config.capacity_override, self.config.max_batch_size)
        fits = [b for b in range(1, self.config.max_batch_size + 1) if self.is_realtime_at(b)]
        largest_batch = fits[-1] if fits else 0
        if not self.config.is_deadline_scheduling or largest_batch == 0:
            return largest_batch
        measured = StepCost(self._fresh_means(), self._vocoder_s_per_frame)
        return max(largest_batch, streams_kept(measured, self.config.max_batch_size, self.config.min_steps_per_s))

    @property
    def admission_limit(self) -> int:
        """Sequences that may run while a stream runs: the capacity, but at least one (progress first)."""
        return max(self.capacity, 1)

    def queue_wait_s(self, num_running: int, num_ahead: int, expected_steps: int) -> float:
        """Estimated seconds a stream queued now waits before it starts.

        Slots free at ``limit / (steps per stream x step seconds)`` per second; the
        stream starts once ``num_running + num_ahead + 1 - limit`` streams have ended.
        A stream's length is the mean of finished ones, the first request's bound counted as one
        of them (``expected_steps`` before any).
        """
        limit = self.admission_limit
        num_to_end = num_running + num_ahead + 1 - limit
        if num_to_end <= 0:
            return 0.0
        steps = self._stream_steps if self._stream_steps is not None else float(expected_steps)
        step_s = self.step_s(limit) or 1.0 / self.config.min_steps_per_s
        return num_to_end * steps * step_s / limit


def _estimate(means: dict[int, float], batch_size: int) -> float | None:
    """Seconds of a step at ``batch_size`` from the measured means (the rules in the module docstring)."""
    if batch_size in means:
        return means[batch_size]
    sizes = sorted(means)
    below = [b for b in sizes if b < batch_size]
    above = [b for b in sizes if b > batch_size]
    if below and above:
        return _line(below[-1], means[below[-1]], above[0], means[above[0]], batch_size)
    if above:  # smaller than anything measured: a smaller batch is not slower
        return means[above[0]]
    if len(below) >= 2:
        b0, b1 = below[-2], below[-1]
        return max(means[b1], _line(b0, means[b0], b1, means[b1], batch_size))
    if below and batch_size == below[-1] + 1:  # one size measured: probe one more stream
        return means[below[-1]]
    return None


def _line(x0: int, y0: float, x1: int, y1: float, x: int) -> float:
    """y at x on the line through (x0, y0) and (x1, y1), never decreasing with x."""
    slope = max((y1 - y0) / (x1 - x0), 0.0)
    return y0 + slope * (x - x0)


def realtime_policy(config: EngineConfig, frames_per_s: float) -> RealtimePolicy:
    """The real-time policy of ``config``: it learns the capacity always, the scheduler enforces it unless off."""
    return RealtimePolicy(
        RealtimeConfig(
            frames_per_s=frames_per_s,
            margin=config.realtime_margin,
            max_batch_size=config.max_batch_size,
            max_queue_wait_s=config.max_queue_wait_s,
            capacity_override=config.realtime_capacity_override,
            is_deadline_scheduling=config.scheduling == "deadline",
        )
    )
