"""Deadline-aware row selection: which running sequences decode this step (no torch here).

Why: every running row costs the same step whatever its listener has buffered. A stream
with seconds of audio queued ahead of its player needs no frame now; one about to run dry
needs one every 21.3 ms. Ordering rows by *slack* (earliest deadline first) lets the rows far
ahead sit out, where a smaller batch makes more frames per second, while the rows near their
deadline and new arrivals' first chunks run in a smaller, faster batch. A row whose slack is
below ``min_slack_s`` always runs: it may not sit out. And the frames that exist reach a listener
about to run dry at once (a late chunk) instead of when the planned chunk is complete.

Everything here is a pure function of plain data, so the policy is unit-tested on its own:

* :func:`slack_s`: seconds a row can wait before its listener runs dry (a newcomer's first
  chunk is due at once), minus the time to make the frames its next chunk still needs;
* :func:`is_chunk_late`: whether a playing listener is about to run dry, so what is made leaves now;
* :func:`choose_rows`: the rows to run, given rows with slack and the step cost by batch size;
* :func:`streams_kept`: how many streams the box keeps at real time when it may rotate rows
  this way, which real-time admission uses, so "capacity" means one thing in both places.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass
class PlaybackClock:
    """What the engine knows of one listener's player (plain numbers, updated by the engine core).

    The player is the one the load tester simulates: it starts once it holds ``buffer_s`` of
    audio (or the whole stream), then plays at 1x and runs dry at its start plus the audio sent.

    Attributes:
        buffer_s: audio the client buffers before it plays.
        arrival_s: when the request arrived (``time.perf_counter``).
        first_audio_s: when its first audio left the engine; None before.
        playing_since_s: when the audio sent first reached ``buffer_s`` (the player started); None before.
        emitted_audio_s: seconds of audio emitted so far.
        num_frames_to_next_chunk: code frames the row must still make before its next chunk leaves.
    """

    buffer_s: float
    arrival_s: float
    first_audio_s: float | None = None
    playing_since_s: float | None = None
    emitted_audio_s: float = 0.0
    num_frames_to_next_chunk: int = 0

    def deadline_s(self) -> float:
        """When the listener needs more audio: its first chunk (due at once), its player's start, or running dry.

        The first chunk is what a new listener waits on, and it takes few steps: due on arrival, a
        newcomer runs before any stream already playing, so its time to first audio stays short.
        """
        if self.first_audio_s is None:
            return self.arrival_s
        if self.playing_since_s is None:
            return self.first_audio_s + self.buffer_s
        return self.playing_since_s + self.emitted_audio_s

    def observe(self, now_s: float, first_audio_s: float | None, emitted_audio_s: float, num_frames: int) -> None:
        """The engine core's view after a step: audio sent so far and frames to the next chunk."""
        self.first_audio_s = first_audio_s
        self.emitted_audio_s = emitted_audio_s
        self.num_frames_to_next_chunk = num_frames
        if self.playing_since_s is None and first_audio_s is not None and emitted_audio_s >= self.buffer_s:
            self.playing_since_s = now_s


def slack_s(clock: PlaybackClock, now_s: float, step_s: float) -> float:
    """Seconds this row may sit out: time to its deadline less the steps its next chunk needs."""
    return clock.deadline_s() - now_s - clock.num_frames_to_next_chunk * step_s


def is_chunk_late(clock: PlaybackClock, now_s: float, margin_s: float) -> bool:
    """Is this listener's player within ``margin_s`` of running dry? Then what is made leaves now.

    Why: chunks grow (24, 48, 96 frames) to cut the vocoder's re-decoded context, which pays while
    the stream runs well ahead of real time. Near real time a 96-frame chunk takes longer to make
    than a 1 s player buffer lasts, and the listener hears a gap the engine had the frames to
    prevent. Leaving at the last moment, rather than as soon as the planned chunk looks late, keeps
    the chunk as large as the listener's buffer allows: the vocoder re-decodes no more than it must.
    Only a playing listener can run dry; before that the planned (small) chunks start its player.
    """
    if clock.playing_since_s is None:
        return False
    return clock.deadline_s() - now_s < margin_s


@dataclass(frozen=True)
class RowSlack:
    """One running row: its id and its slack in seconds (None: nobody listens, batch work).

    ``is_first_chunk``: a newcomer still making its first chunk. It goes first, but it alone never
    makes others sit out: its listener hears nothing yet, so there is no gap to prevent.
    """

    seq_id: int
    slack_s: float | None
    is_first_chunk: bool = False


@dataclass(frozen=True)
class StepCost:
    """Seconds of one decode step by batch size (GPT only) and the vocoder's seconds per frame.

    ``gpt_step_s`` may lack sizes nothing supports a guess for; such a size is not chosen.
    """

    gpt_step_s: Mapping[int, float]
    vocoder_s_per_frame: float = 0.0

    def step_s(self, batch_size: int) -> float | None:
        """A step of ``batch_size`` rows with the vocoding of the frames it makes; None when unknown."""
        gpt = self.gpt_step_s.get(batch_size)
        return None if gpt is None else gpt + batch_size * self.vocoder_s_per_frame


@dataclass(frozen=True)
class DeadlineConfig:
    """Args:
    step_budget_s: the real-time step: one frame per row per this many seconds keeps every row
        at real time with the admission margin (1 / min steps per second); batch work fills a
        step up to it.
    min_slack_s: a row with less slack always runs.
    rescue_slack_s: rows sit out only while some stream has less slack than this; otherwise every
        row runs (the most frames per second: every listener gains slack for the next rush).
    """

    step_budget_s: float
    min_slack_s: float = 0.15
    rescue_slack_s: float = 0.5

    def __post_init__(self) -> None:
        if self.step_budget_s <= 0 or self.min_slack_s < 0 or self.rescue_slack_s < self.min_slack_s:
            raise ValueError("step_budget_s must be positive and 0 <= min_slack_s <= rescue_slack_s")


def choose_rows(rows: Sequence[RowSlack], cost: StepCost, config: DeadlineConfig) -> list[int]:
    """The ids of the rows to decode this step, most urgent first.

    Streams (rows with a slack) go earliest deadline first. If no playing stream is short of slack
    (under ``rescue_slack_s``), all run: a larger batch makes at least as many frames per second on
    the CPUs measured, and sitting out would only spend slack a later rush needs. Otherwise the step
    runs the ``k`` most urgent, ``k`` being the batch size with the most frames per second (all of
    them where the step grows slower than the batch, as on a CPU; fewer past a kernel cliff or where
    the step grows with every row), plus every stream under ``min_slack_s``; the others sit out. Batch
    work (no slack) fills what is left: it joins while the step stays within the real-time budget
    (or within the cost of the streams' own batch, when that is over the budget already). With no
    stream, or no step cost known yet for the sizes in question, every row runs.

    Why the most frames per second and not the largest batch within the real-time budget: a batch
    just over the budget still makes more frames than a smaller one, and a listener's buffer takes
    them all; measured on a 2-core CPU, capping the batch at the budget cost a fifth of the frames
    and made more gaps than it prevented.
    """
    streams = sorted((r for r in rows if r.slack_s is not None), key=lambda r: (r.slack_s, r.seq_id))
    batch_work = [r for r in rows if r.slack_s is None]
    if not streams:
        return [r.seq_id for r in batch_work]
    num_fast = _most_frames_size(len(streams), cost)
    is_rescue = any(
        r.slack_s is not None and r.slack_s < config.rescue_slack_s and not r.is_first_chunk for r in streams
    )
    if num_fast is None:  # nothing measured: the most frames per second (and a measurement of that size)
        return [r.seq_id for r in (*streams, *batch_work)]
    if not is_rescue:  # nobody short of slack: every stream
        num_fast = len(streams)
    num_urgent = sum(1 for r in streams if r.slack_s is not None and r.slack_s < config.min_slack_s)
    chosen = streams[: max(num_fast, num_urgent)]
    chosen_cost = cost.step_s(len(chosen)) or 0.0
    limit_s = max(config.step_budget_s, chosen_cost)
    for row in batch_work:
        step = cost.step_s(len(chosen) + 1)
        if step is None or step > limit_s:
            break
        chosen.append(row)
    return [r.seq_id for r in chosen]


def _most_frames_size(num_streams: int, cost: StepCost) -> int | None:
    """The batch size (at most ``num_streams``) with the most frames per second.

    None when the cost of every stream's batch is unknown (the caller then runs every row, which
    measures it); sizes past the first unknown one are not guessed at.
    """
    best: tuple[float, int] | None = None
    for size in range(1, num_streams + 1):
        step = cost.step_s(size)
        if step is None:
            break
        throughput = size / step
        if best is None or throughput >= best[0]:
            best = (throughput, size)
    return None if best is None else best[1]


def streams_kept(cost: StepCost, max_batch_size: int, min_frames_per_s: float) -> int:
    """Streams kept at real time (each needing ``min_frames_per_s``) by rotating real-time batches.

    Rows that sit out still hold their KV slot, so the count is at most ``max_batch_size``.
    """
    budget_s = 1.0 / min_frames_per_s
    best_frames_per_s = 0.0
    for size in range(1, max_batch_size + 1):
        step = cost.step_s(size)
        if step is not None and step <= budget_s:
            best_frames_per_s = max(best_frames_per_s, size / step)
    return min(math.floor(best_frames_per_s / min_frames_per_s + 1e-9), max_batch_size)
