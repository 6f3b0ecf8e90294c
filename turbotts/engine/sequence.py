"""State of one GPT pass (refine text or generate codes); no torch here.

A synthesis request runs one or two sequences: an optional TEXT sequence (the
refine stage, text head) and then a CODE sequence (4 audio-code heads). The
engine core creates them; only the scheduler changes their status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum

from turbotts.engine.deadline import PlaybackClock
from turbotts.params import SamplingParams


class SequenceStatus(IntEnum):
    """Lifecycle, in this order: WAITING -> RUNNING -> one FINISHED_* state.

    WAITING: queued, holds no KV memory. RUNNING: owns a KV slot, prefilled,
    decoding one token per step. FINISHED_*: slot freed; the reason says why.
    """

    WAITING = 0
    RUNNING = 1
    FINISHED_STOPPED = 2  # produced its end-of-sequence token
    FINISHED_LENGTH = 3  # reached max_new_tokens or the end of its KV slot
    FINISHED_ABORTED = 4  # cancelled by the caller

    @property
    def is_finished(self) -> bool:
        return self >= SequenceStatus.FINISHED_STOPPED


class SequenceKind(str, Enum):
    TEXT = "text"  # refine stage: one text id per step
    CODE = "code"  # audio codes: num_vq ids per step


@dataclass(eq=False)
class Sequence:
    """One GPT pass: prompt ids in, generated ids out.

    Attributes:
        prompt_ids: text token ids of the decorated prompt (no padding).
        voice: official voice string placed at ``[spk_emb]``, or None.
        prompt_codes: audio codes after the text (a reference clip, zero-shot voice), one list
            of num_vq ids per position; they take KV space like text tokens.
        seed: sampler seed (the engine draws one when the caller gave none).
        output_ids: generated ids; for CODE one list of num_vq ids per step.
        is_realtime: part of a stream a listener plays as it arrives (real-time admission applies).
        playback: that listener's player as the engine core last saw it (deadline scheduling); None
            for work nobody plays as it comes.
    """

    seq_id: int
    kind: SequenceKind
    prompt_ids: list[int]
    sampling: SamplingParams
    seed: int
    voice: str | None = None
    prompt_codes: list[list[int]] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    slot: int | None = None
    output_ids: list[list[int]] = field(default_factory=list)
    max_new_tokens: int = 0  # set on admission: min(sampling.max_new_tokens, room left in the slot)
    is_abort_requested: bool = False
    is_realtime: bool = False
    playback: PlaybackClock | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.prompt_codes)

    @property
    def num_generated(self) -> int:
        return len(self.output_ids)

    @property
    def num_cached_tokens(self) -> int:
        """Tokens whose K/V sit in the slot: the prompt plus all but the newest output."""
        return self.num_prompt_tokens + max(self.num_generated - 1, 0)
