"""Vectorized per-row sampling: every row of a batch has its own temperature,
top-p, top-k, repetition penalty, EOS ban and seed, in one set of tensor ops.

Rows are (sequence, codebook) pairs for audio codes and sequences for text. The
order of operations equals the official generate loop: divide by temperature,
repetition penalty over the last 16 generated ids, top-p (keeping at least 3),
top-k (at least 3), ban EOS before ``min_new_tokens``, softmax, draw.

Randomness is counter based: the uniform number of a row is a hash of its
sequence seed, its step and its column. A request's draws therefore depend on
nothing else in the batch, need no generator state, and stay reproducible
across restarts and devices.

On CPU, where the model's compiled kernels are loaded (int8), :func:`sample`
runs the same pipeline as one C++ call per step (``cpu/kernels/sample_rows.cpp``):
the ~60 small torch ops each pay a dispatch that is large next to their work,
which counts against an int8 batch-1 step that is otherwise bound by its weight reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch

MIN_TOKENS_TO_KEEP = 3
PENALTY_WINDOW = 16
_MASK32 = 0xFFFFFFFF


@dataclass(frozen=True)
class SamplingBatch:
    """Per-row sampling inputs; every tensor has R rows.

    Attributes:
        temperature: (R, 1) float32, > 0.
        repetition_penalty: (R, 1) float32; 1.0 disables the penalty for a row.
        top_p: (R, 1) float32 in (0, 1].
        top_k: (R,) int64 >= 1.
        history: (R, W) int64 recent generated ids; entries equal to the vocabulary
            size are padding and count for nothing.
        ban_eos: (R,) bool, True while a row is below its min_new_tokens.
        is_greedy: (R,) bool, argmax instead of drawing.
        seeds: (R,) int64 per-row seed (already mixed with the column index).
        steps: (R,) int64 per-row step counter.
    """

    temperature: torch.Tensor
    repetition_penalty: torch.Tensor
    top_p: torch.Tensor
    top_k: torch.Tensor
    history: torch.Tensor
    ban_eos: torch.Tensor
    is_greedy: torch.Tensor
    seeds: torch.Tensor
    steps: torch.Tensor


def apply_repetition_penalty(logits: torch.Tensor, history: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Scale each id by penalty**count, count = occurrences in the row's history.

    Negative logits are multiplied and the others divided, so a penalty always
    lowers the logit (as the official processor does).
    """
    num_rows, vocab = logits.shape
    counts = torch.zeros(num_rows, vocab + 1, dtype=logits.dtype, device=logits.device)
    counts.scatter_add_(1, history, torch.ones_like(history, dtype=logits.dtype))
    alpha = torch.pow(penalty, counts[:, :vocab])  # (R, V)
    return torch.where(logits < 0, logits * alpha, logits / alpha)


def apply_top_p(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Drop the low tail whose probability mass is at most 1 - top_p (HF semantics)."""
    sorted_logits, sorted_idx = torch.sort(logits, descending=False)
    cum_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cum_probs <= (1 - top_p)
    remove_sorted[:, -MIN_TOKENS_TO_KEEP:] = False
    remove = remove_sorted.scatter(1, sorted_idx, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def apply_top_k(logits: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Keep the k largest logits of each row (k >= 3, ties at the k-th kept)."""
    k = top_k.clamp(min=MIN_TOKENS_TO_KEEP, max=logits.shape[1])
    max_k = int(k.max())
    top_values = torch.topk(logits, max_k, dim=-1).values  # (R, max_k)
    kth = top_values.gather(1, (k - 1).unsqueeze(1))  # (R, 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def process_logits(logits: torch.Tensor, batch: SamplingBatch, eos_id: int) -> torch.Tensor:
    """Logits (R, V) -> filtered logits (R, V) with -inf on dropped ids."""
    logits = logits.float() / batch.temperature
    if bool((batch.repetition_penalty != 1.0).any()):
        logits = apply_repetition_penalty(logits, batch.history, batch.repetition_penalty)
    logits = apply_top_p(logits, batch.top_p)
    logits = apply_top_k(logits, batch.top_k)
    logits[:, eos_id] = logits[:, eos_id].masked_fill(batch.ban_eos, float("-inf"))
    return logits


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finalizer on int64 tensors holding 32-bit values."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK32
    return h ^ (h >> 16)


def counter_uniform(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Uniform numbers in [0, 1) (float64, 53 bits) from (seed, step) pairs."""
    lo = seeds & _MASK32
    hi = (seeds >> 32) & _MASK32
    key = _fmix32(lo ^ _fmix32(hi ^ 0x9E3779B9))
    h1 = _fmix32(key ^ _fmix32(steps & _MASK32))
    h2 = _fmix32(h1 ^ 0x68E31DA4)
    mantissa = (h1 << 21) | (h2 >> 11)  # 53 random bits
    return mantissa.double() / float(2**53)


def draw(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw of one id per row; ids with zero probability are never drawn."""
    cdf = probs.double().cumsum(dim=-1)  # (R, V)
    target = (uniforms * cdf[:, -1]).unsqueeze(1)  # (R, 1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(1)
    return idx.clamp(max=probs.shape[1] - 1)


def greedy_ids(logits: torch.Tensor, batch: SamplingBatch, eos_id: int) -> torch.Tensor:
    """Argmax after the repetition penalty and the EOS ban (temperature and the
    top-p/top-k filters never change the argmax)."""
    logits = logits.float()
    if bool((batch.repetition_penalty != 1.0).any()):
        logits = apply_repetition_penalty(logits, batch.history, batch.repetition_penalty)
    logits[:, eos_id] = logits[:, eos_id].masked_fill(batch.ban_eos, float("-inf"))
    return logits.argmax(dim=-1)


def sample(logits: torch.Tensor, batch: SamplingBatch, eos_id: int, kernel: ModuleType | None = None) -> torch.Tensor:
    """Pick the next id of every row: (R, V) logits -> (R,) int64.

    ``kernel``: the compiled CPU sampler (``turbotts.cpu.extensions.load_sampler()``) to run it as one call
    where the logits are on CPU; None: torch ops.
    """
    if kernel is not None and logits.device.type == "cpu":
        return sample_on_kernel(kernel, logits, batch, eos_id)
    if bool(batch.is_greedy.all()):
        return greedy_ids(logits, batch, eos_id)
    probs = process_logits(logits, batch, eos_id).softmax(dim=-1)
    drawn = draw(probs, counter_uniform(batch.seeds, batch.steps))
    if bool(batch.is_greedy.any()):
        drawn = torch.where(batch.is_greedy, greedy_ids(logits, batch, eos_id), drawn)
    return drawn


def sample_on_kernel(
    kernel: ModuleType, logits: torch.Tensor, batch: SamplingBatch, eos_id: int, probs_out: torch.Tensor | None = None
) -> torch.Tensor:
    """:func:`sample` in one C++ call; ``probs_out`` (R, V) float32, where given, receives each sampled
    row's final probabilities (for tests)."""
    ids: torch.Tensor = kernel.sample_rows(
        logits.float().contiguous(),
        batch.temperature.float().contiguous(),
        batch.repetition_penalty.float().contiguous(),
        batch.top_p.float().contiguous(),
        batch.top_k.long().contiguous(),
        batch.history.long().contiguous(),
        batch.ban_eos.contiguous(),
        batch.is_greedy.contiguous(),
        batch.seeds.long().contiguous(),
        batch.steps.long().contiguous(),
        eos_id,
        torch.empty(0) if probs_out is None else probs_out,
    )
    return ids


def column_seeds(seed: int, num_columns: int) -> list[int]:
    """Distinct seeds for the codebook columns of one sequence (63-bit)."""
    return [(seed * 0x9E3779B97F4A7C15 + column * 0xBF58476D1CE4E5B9) % (2**63) for column in range(num_columns)]
