"""Iteration-level scheduling policy (no torch here).

Every step: drop aborted sequences, decode the running ones, and admit waiting
sequences first-come-first-served while a KV slot and a batch place are free.
With ``scheduling="fifo"`` every running sequence decodes every step; with
``"deadline"`` (the default) :func:`turbotts.engine.deadline.choose_rows` picks them by
their listeners' slack, so rows far ahead of their players may sit out a step.
A new sequence is prefilled in the step that admits it and joins the decode
batch in the next one, so nobody waits for the longest member of a batch.

With real-time admission (a :class:`RealtimePolicy`, enforced), a batch place is only free
for a stream while the batch stays within the real-time capacity, and so is it for
any sequence while a stream runs; batch work alone may fill up to ``max_batch_size``.
A stream whose estimated queue wait passes ``max_queue_wait_s`` is refused at once.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from turbotts.engine.batch import DecodeItem, PrefillItem, RunnerOutput, SchedulerOutput
from turbotts.engine.deadline import DeadlineConfig, RowSlack, choose_rows, slack_s
from turbotts.engine.kv import SlotAllocator
from turbotts.engine.realtime import RealtimePolicy
from turbotts.engine.sequence import Sequence, SequenceKind, SequenceStatus
from turbotts.errors import InvalidInputError, QueueFullError, StreamCapacityError


@dataclass(frozen=True)
class SchedulerConfig:
    max_batch_size: int
    max_waiting: int
    num_slots: int
    max_seq_len: int
    max_prefill_tokens: int
    audio_eos_id: int
    text_eos_id: int
    is_realtime_admission: bool = False  # enforce the real-time policy (it measures either way)
    scheduling: str = "fifo"  # fifo: every running row decodes each step; deadline: by listeners' slack
    min_slack_s: float = 0.15  # deadline: a row with less slack always runs


@dataclass(frozen=True)
class SequenceUpdate:
    """One sequence's result of a step, for the engine core to stream."""

    seq: Sequence
    new_ids: list[int] | None  # None when the step ended it without a new token
    is_finished: bool
    row: int  # this sequence's row in the step's RunnerOutput (its hidden state, for the decoder)


class Scheduler:
    """Owns every sequence's status; the engine core asks it what to run."""

    def __init__(
        self,
        config: SchedulerConfig,
        realtime: RealtimePolicy | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if config.scheduling not in ("fifo", "deadline"):
            raise ValueError(f"scheduling must be fifo or deadline, not {config.scheduling!r}")
        self.config = config
        self.realtime = realtime  # measures step times; enforced when config.is_realtime_admission
        self._clock = clock
        self.num_sat_out = 0  # running rows the last step left out (deadline scheduling), for metrics
        self._slots = SlotAllocator(config.num_slots)
        self._waiting: deque[Sequence] = deque()
        self._running: dict[int, Sequence] = {}
        self.num_refused_realtime = 0

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_free_slots(self) -> int:
        return self._slots.num_free

    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    def can_add(self) -> bool:
        return len(self._waiting) < self.config.max_waiting

    def add(self, seq: Sequence) -> None:
        """Queue a sequence.

        Raises:
            QueueFullError: the waiting queue is at ``max_waiting``.
            InvalidInputError: the prompt does not fit in one KV slot.
            StreamCapacityError: a stream would wait longer than ``max_queue_wait_s``.
        """
        if seq.num_prompt_tokens >= self.config.max_seq_len:
            raise InvalidInputError(
                f"the prompt has {seq.num_prompt_tokens} tokens but a sequence holds at most "
                f"{self.config.max_seq_len - 1}; shorten the text or split it into segments"
            )
        if not self.can_add():
            raise QueueFullError(f"the waiting queue is full ({self.config.max_waiting}); retry later")
        if seq.is_realtime:
            self._check_queue_wait(seq)
        self._waiting.append(seq)

    def _expected_steps(self, seq: Sequence) -> int:
        """The most decode steps ``seq`` can run: its token bound, or what its KV slot holds."""
        return min(seq.sampling.max_new_tokens, self.config.max_seq_len - seq.num_prompt_tokens)

    def _check_queue_wait(self, seq: Sequence) -> None:
        policy = self.realtime
        if policy is None or not self.config.is_realtime_admission or policy.config.max_queue_wait_s <= 0:
            return
        wait_s = policy.queue_wait_s(len(self._running), len(self._waiting), self._expected_steps(seq))
        max_wait_s = policy.config.max_queue_wait_s
        if wait_s > max_wait_s:
            self.num_refused_realtime += 1
            raise StreamCapacityError(
                f"no real-time stream slot soon: about {wait_s:.1f} s of queue for {policy.admission_limit} "
                f"real-time stream(s) (max_queue_wait_s={max_wait_s:g}); retry later or on another replica",
                retry_after_s=wait_s - max_wait_s,
            )

    def add_priority(self, seq: Sequence) -> None:
        """Queue a follow-up sequence of admitted work (refine -> codes) at the front.

        It bypasses ``max_waiting``: its request was admitted already.
        """
        self._waiting.appendleft(seq)

    def abort(self, seq: Sequence) -> None:
        """Mark for removal; its slot is freed at the next schedule()."""
        seq.is_abort_requested = True

    def schedule(self) -> SchedulerOutput:
        self._drop_aborted()
        decode = [self._decode_item(seq) for seq in self._rows_to_decode()]
        prefill: list[PrefillItem] = []
        num_prefill_tokens = 0
        while self._waiting and self._slots.can_allocate():
            if len(self._running) >= self._batch_limit(self._waiting[0]):
                break
            seq = self._waiting[0]
            if prefill and num_prefill_tokens + seq.num_prompt_tokens > self.config.max_prefill_tokens:
                break
            self._waiting.popleft()
            self._admit(seq)
            num_prefill_tokens += seq.num_prompt_tokens
            slot = self._slot_of(seq)
            item = PrefillItem(
                seq.seq_id, slot, seq.kind, seq.prompt_ids, seq.voice, seq.sampling, seq.seed, seq.prompt_codes
            )
            prefill.append(item)
        return SchedulerOutput(prefill=prefill, decode=decode)

    def _rows_to_decode(self) -> list[Sequence]:
        """Every running row (FIFO), or the rows the deadline policy picks by slack."""
        running = list(self._running.values())
        self.num_sat_out = 0
        policy = self.realtime
        if self.config.scheduling != "deadline" or policy is None or len(running) < 2:
            return running
        budget_s = policy.step_budget_s  # what batch work may fill the step to
        now_s = self._clock()
        step_s = policy.step_s(len(running)) or policy.realtime_step_s  # the pace the rows' next frames come at
        rows = [_row_slack(seq, now_s, step_s) for seq in running]
        config = DeadlineConfig(step_budget_s=budget_s, min_slack_s=self.config.min_slack_s)
        chosen = choose_rows(rows, policy.step_cost(len(running)), config)
        self.num_sat_out = len(running) - len(chosen)
        return [self._running[seq_id] for seq_id in chosen]

    def _batch_limit(self, seq: Sequence) -> int:
        """How many may run once ``seq`` starts: the real-time limit when a stream is (or would be) in the batch."""
        if self.realtime is None or not self.config.is_realtime_admission:
            return self.config.max_batch_size
        if seq.is_realtime or any(s.is_realtime for s in self._running.values()):
            return min(self.realtime.admission_limit, self.config.max_batch_size)
        return self.config.max_batch_size

    def observe_step(self, num_prefill: int, num_decode: int, duration_s: float) -> None:
        """The engine core's step time: pure decode steps teach the real-time policy."""
        if self.realtime is not None and num_prefill == 0:
            self.realtime.observe_step(num_decode, duration_s)

    def observe_vocoder(self, num_frames: int, duration_s: float) -> None:
        """The engine core's vocoder time for ``num_frames`` new frames (part of every stream's step cost)."""
        if self.realtime is not None:
            self.realtime.observe_vocoder(num_frames, duration_s)

    def update(self, output: RunnerOutput) -> list[SequenceUpdate]:
        """Record the sampled ids, decide who finished, free their slots."""
        updates = []
        for row, (seq_id, ids) in enumerate(zip(output.seq_ids, output.sampled, strict=True)):
            seq = self._running[seq_id]
            if self._is_eos(seq, ids):
                self._finish(seq, SequenceStatus.FINISHED_STOPPED)
                updates.append(SequenceUpdate(seq, None, True, row))
                continue
            seq.output_ids.append(ids)
            is_full = seq.num_generated >= seq.max_new_tokens
            if is_full:
                self._finish(seq, SequenceStatus.FINISHED_LENGTH)
            updates.append(SequenceUpdate(seq, ids, is_full, row))
        return updates

    def _is_eos(self, seq: Sequence, ids: list[int]) -> bool:
        if seq.sampling.ignore_eos:
            return False
        eos = self.config.audio_eos_id if seq.kind is SequenceKind.CODE else self.config.text_eos_id
        return eos in ids

    def _admit(self, seq: Sequence) -> None:
        seq.slot = self._slots.allocate()
        seq.status = SequenceStatus.RUNNING
        seq.max_new_tokens = min(seq.sampling.max_new_tokens, self.config.max_seq_len - seq.num_prompt_tokens)
        self._running[seq.seq_id] = seq

    def _slot_of(self, seq: Sequence) -> int:
        if seq.slot is None:
            raise RuntimeError(f"sequence {seq.seq_id} has no slot")
        return seq.slot

    def _decode_item(self, seq: Sequence) -> DecodeItem:
        return DecodeItem(
            seq_id=seq.seq_id,
            slot=self._slot_of(seq),
            kind=seq.kind,
            position=seq.num_cached_tokens,
            step=seq.num_generated,
            last_ids=seq.output_ids[-1],
        )

    def _finish(self, seq: Sequence, status: SequenceStatus) -> None:
        seq.status = status
        is_ended_stream = (
            seq.is_realtime and seq.kind is SequenceKind.CODE and status is not SequenceStatus.FINISHED_ABORTED
        )
        if self.realtime is not None and is_ended_stream:
            self.realtime.observe_finished_stream(seq.num_generated, self._expected_steps(seq))
        del self._running[seq.seq_id]
        slot = self._slot_of(seq)
        self._slots.free(slot)
        seq.slot = None

    def _drop_aborted(self) -> None:
        for seq in [s for s in self._running.values() if s.is_abort_requested]:
            self._finish(seq, SequenceStatus.FINISHED_ABORTED)
        kept = deque(s for s in self._waiting if not s.is_abort_requested)
        for seq in self._waiting:
            if seq.is_abort_requested:
                seq.status = SequenceStatus.FINISHED_ABORTED
        self._waiting = kept


def _row_slack(seq: Sequence, now_s: float, step_s: float) -> RowSlack:
    """What the deadline policy reads of one running row."""
    clock = seq.playback
    if clock is None:
        return RowSlack(seq.seq_id, None)
    return RowSlack(seq.seq_id, slack_s(clock, now_s, step_s), is_first_chunk=clock.first_audio_s is None)
