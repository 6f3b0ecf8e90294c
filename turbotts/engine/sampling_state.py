"""Per-slot sampling state: each sequence's sampling parameters and penalty window, kept on the device by slot.

Written once at prefill and read by slot index every step, so sampling a step gathers rows instead of
rebuilding tensors from the requests' parameters (the runner knows slots and sequences, never requests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbotts.engine.batch import PrefillItem
from turbotts.engine.sampler import PENALTY_WINDOW, SamplingBatch, column_seeds
from turbotts.engine.sequence import SequenceKind


@dataclass
class SlotSampling:
    """Per-slot sampling parameters, written at prefill, read by index every step."""

    temperature: torch.Tensor  # (S, num_vq) float32
    top_p: torch.Tensor  # (S, 1) float32
    top_k: torch.Tensor  # (S,) int64
    penalty: torch.Tensor  # (S, 1) float32
    min_new_tokens: torch.Tensor  # (S,) int64
    is_greedy: torch.Tensor  # (S,) bool
    seeds: torch.Tensor  # (S, num_vq) int64
    history: torch.Tensor  # (S, num_vq, PENALTY_WINDOW) int64, -1 = empty

    @classmethod
    def empty(cls, num_slots: int, num_vq: int, device: torch.device) -> SlotSampling:
        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        return cls(
            temperature=torch.ones(num_slots, num_vq, device=device),
            top_p=torch.ones(num_slots, 1, device=device),
            top_k=zeros(num_slots, dtype=torch.int64),
            penalty=torch.ones(num_slots, 1, device=device),
            min_new_tokens=zeros(num_slots, dtype=torch.int64),
            is_greedy=zeros(num_slots, dtype=torch.bool),
            seeds=zeros(num_slots, num_vq, dtype=torch.int64),
            history=torch.full((num_slots, num_vq, PENALTY_WINDOW), -1, dtype=torch.int64, device=device),
        )


class SamplingState:
    """The slots' sampling tensors, and the :class:`SamplingBatch` of the rows a step samples."""

    def __init__(self, num_slots: int, num_vq: int, device: torch.device) -> None:
        self.num_vq = num_vq
        self.slots = SlotSampling.empty(num_slots, num_vq, device)
        # the per-row parameters of the last batch sampled (they change only when a slot is written):
        # a steady batch gathers them once, not in about ten small ops every step
        self._row_params: tuple[tuple[tuple[int, ...], int, int], dict[str, torch.Tensor]] | None = None
        self._slot_writes = 0

    def write(self, item: PrefillItem) -> None:
        """Store the sampling parameters and seeds of the sequence that ``item`` prefills, and clear its history."""
        s, p = self.slots, item.sampling
        num_columns = self.num_vq if item.kind is SequenceKind.CODE else 1
        temps = list(p.temperatures(num_columns)) + [1.0] * (self.num_vq - num_columns)
        s.temperature[item.slot] = torch.tensor(temps)
        s.top_p[item.slot] = p.top_p
        s.top_k[item.slot] = p.top_k
        s.penalty[item.slot] = p.repetition_penalty
        s.min_new_tokens[item.slot] = p.min_new_tokens
        s.is_greedy[item.slot] = p.greedy
        s.seeds[item.slot] = torch.tensor(column_seeds(item.seed, self.num_vq))
        s.history[item.slot] = -1
        self._slot_writes += 1

    def batch(
        self,
        row_slots: tuple[int, ...],
        slot_t: torch.Tensor,
        step_t: torch.Tensor,
        num_columns: int,
        vocab: int,
    ) -> SamplingBatch:
        """What :func:`turbotts.engine.sampler.sample` needs for these rows, one sampled row per (row, column)."""
        params = self._params_of_rows(row_slots, slot_t, num_columns)
        history = self.slots.history[slot_t, :num_columns].flatten(0, 1)  # (R, W)
        return SamplingBatch(
            temperature=params["temperature"],
            repetition_penalty=params["repetition_penalty"],
            top_p=params["top_p"],
            top_k=params["top_k"],
            history=history.masked_fill(history < 0, vocab),
            ban_eos=(step_t < params["min_new_tokens"]).repeat_interleave(num_columns),
            is_greedy=params["is_greedy"],
            seeds=params["seeds"],
            steps=step_t.repeat_interleave(num_columns),
        )

    def remember(self, slot_t: torch.Tensor, step_t: torch.Tensor, ids: torch.Tensor) -> None:
        """Write the new ids into each slot's repetition-penalty ring buffer."""
        num_columns = ids.shape[1]
        self.slots.history[slot_t, :num_columns, step_t % PENALTY_WINDOW] = ids  # (R, num_columns)

    def _params_of_rows(
        self, row_slots: tuple[int, ...], slot_t: torch.Tensor, num_columns: int
    ) -> dict[str, torch.Tensor]:
        """The fixed sampling parameters of these rows, one per (row, column); reused while no slot is rewritten."""
        key = (row_slots, num_columns, self._slot_writes)
        if self._row_params is not None and self._row_params[0] == key:
            return self._row_params[1]
        s = self.slots
        params = {
            "temperature": s.temperature[slot_t, :num_columns].reshape(-1, 1),
            "repetition_penalty": s.penalty[slot_t].repeat_interleave(num_columns, dim=0),
            "top_p": s.top_p[slot_t].repeat_interleave(num_columns, dim=0),
            "top_k": s.top_k[slot_t].repeat_interleave(num_columns),
            "min_new_tokens": s.min_new_tokens[slot_t],
            "is_greedy": s.is_greedy[slot_t].repeat_interleave(num_columns),
            "seeds": s.seeds[slot_t, :num_columns].reshape(-1),
        }
        self._row_params = (key, params)
        return params
