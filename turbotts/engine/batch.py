"""The contract between the scheduler (policy, no tensors) and the model runner
(tensors, no requests): plain dataclasses only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from turbotts.engine.sequence import SequenceKind
from turbotts.params import SamplingParams


@dataclass(frozen=True)
class PrefillItem:
    """Write a prompt into ``slot`` and sample the first token.

    The prompt is ``prompt_ids`` (text) followed by ``prompt_codes`` (audio codes of a
    reference clip, one list of num_vq ids per position; usually empty).
    """

    seq_id: int
    slot: int
    kind: SequenceKind
    prompt_ids: list[int]
    voice: str | None
    sampling: SamplingParams
    seed: int
    prompt_codes: list[list[int]] = field(default_factory=list)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.prompt_codes)


@dataclass(frozen=True)
class DecodeItem:
    """Feed the newest token of the sequence in ``slot`` and sample the next one.

    ``position`` is the new token's position (= tokens already cached) and
    ``step`` the index of the token to sample (its count of generated tokens).
    """

    seq_id: int
    slot: int
    kind: SequenceKind
    position: int
    step: int
    last_ids: list[int]


@dataclass(frozen=True)
class SchedulerOutput:
    prefill: list[PrefillItem]
    decode: list[DecodeItem]

    @property
    def is_empty(self) -> bool:
        return not self.prefill and not self.decode


@dataclass(frozen=True)
class RunnerOutput:
    """What one step produced, in the order prefill items then decode items.

    ``hidden`` is an opaque (N, hidden) tensor of the positions that predicted the
    sampled ids; the scheduler never looks at it, the streaming decoder does.
    """

    seq_ids: list[int]
    sampled: list[list[int]]
    hidden: Any = None
