"""Decode steps on fixed batch-size buckets with static buffers, replayed as CUDA graphs.

A CUDA graph replays a captured kernel sequence without Python or launch
overhead, but only for the exact shapes and memory it was captured with. So a
decode batch of B rows is padded up to the next bucket size; every input lives
in a preallocated buffer; attention reads a fixed ``max_seq_len`` keys per row
under a mask (the GATHER strategy); and padding rows write into a scratch KV
slot that no sequence owns.

With ``use_graphs=False`` the same static path runs eagerly, which is how the
bucketing, padding and masking are tested on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbotts.errors import EngineError
from turbotts.model.attention_metadata import DecodeMetadata, DecodeStrategy
from turbotts.model.gpt import GPT
from turbotts.model.kv_cache import KVCache

DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


@dataclass
class _Bucket:
    size: int
    embeds: torch.Tensor  # (N, H)
    positions: torch.Tensor  # (N,) int64
    slots: torch.Tensor  # (N,) int64
    key_mask: torch.Tensor  # (N, 1, 1, max_seq_len) bool
    output: torch.Tensor | None = None  # (N, H), written by the graph
    graph: torch.cuda.CUDAGraph | None = None


class StaticDecoder:
    """Runs ``GPT.decode`` on padded, static-shape batches; optionally as CUDA graphs."""

    def __init__(
        self,
        gpt: GPT,
        cache: KVCache,
        *,
        scratch_slot: int,
        max_batch_size: int,
        buckets: tuple[int, ...] = DEFAULT_BUCKETS,
        use_graphs: bool,
    ) -> None:
        if use_graphs and not torch.cuda.is_available():
            raise EngineError("CUDA graphs need a CUDA device; run with use_graphs=False on CPU")
        self.gpt = gpt
        self.cache = cache
        self.scratch_slot = scratch_slot
        self.max_seq_len = cache.max_seq_len
        self.use_graphs = use_graphs
        sizes = sorted({b for b in buckets if b < max_batch_size} | {max_batch_size})
        weight = gpt.norm.weight
        self._key_positions = torch.arange(self.max_seq_len, device=weight.device)
        self._buckets = {size: self._new_bucket(size, weight) for size in sizes}
        if use_graphs:
            for bucket in self._buckets.values():
                self._capture(bucket)

    @property
    def bucket_sizes(self) -> list[int]:
        return sorted(self._buckets)

    def _new_bucket(self, size: int, weight: torch.Tensor) -> _Bucket:
        device = weight.device
        return _Bucket(
            size=size,
            embeds=torch.zeros(size, self.gpt.config.hidden_size, dtype=weight.dtype, device=device),
            positions=torch.zeros(size, dtype=torch.int64, device=device),
            slots=torch.full((size,), self.scratch_slot, dtype=torch.int64, device=device),
            key_mask=torch.zeros(size, 1, 1, self.max_seq_len, dtype=torch.bool, device=device),
        )

    def _meta(self, bucket: _Bucket) -> DecodeMetadata:
        # slot_ids/cache_lens are only read by Python-side checks, done in decode() instead
        rows = tuple(range(bucket.size))
        return DecodeMetadata(
            slot_ids=rows,
            cache_lens=(0,) * bucket.size,
            slot_index=bucket.slots,
            write_index=bucket.positions,
            key_mask=bucket.key_mask,
            strategy=DecodeStrategy.GATHER,
        )

    def _forward(self, bucket: _Bucket) -> torch.Tensor:
        meta = self._meta(bucket)
        x = bucket.embeds.unsqueeze(1)  # (N, 1, H)
        return self.gpt.run_layers(x, bucket.positions.unsqueeze(1), meta, self.cache).squeeze(1)  # (N, H)

    def _capture(self, bucket: _Bucket) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up kernels and allocator outside the graph
                self._forward(bucket)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            bucket.output = self._forward(bucket)
        bucket.graph = graph

    def bucket_for(self, num_rows: int) -> _Bucket:
        for size in self.bucket_sizes:
            if size >= num_rows:
                return self._buckets[size]
        raise EngineError(f"decode batch of {num_rows} exceeds the largest CUDA-graph bucket {self.bucket_sizes[-1]}")

    @torch.inference_mode()
    def decode(self, embeds: torch.Tensor, positions: list[int], slots: list[int]) -> torch.Tensor:
        """(B, H) embeddings of each row's newest token -> (B, H) hidden states."""
        num_rows = len(slots)
        if len(set(slots)) != num_rows or self.scratch_slot in slots:
            raise EngineError("decode rows need distinct slots other than the scratch slot")
        if max(positions) >= self.max_seq_len:
            raise EngineError(f"a sequence reached the KV slot length {self.max_seq_len}")
        bucket = self.bucket_for(num_rows)
        device = bucket.embeds.device
        bucket.embeds[:num_rows].copy_(embeds)
        bucket.embeds[num_rows:].zero_()
        pos = torch.tensor(positions, dtype=torch.int64, device=device)
        bucket.positions[:num_rows].copy_(pos)
        bucket.positions[num_rows:].zero_()
        bucket.slots[:num_rows].copy_(torch.tensor(slots, dtype=torch.int64, device=device))
        bucket.slots[num_rows:].fill_(self.scratch_slot)
        bucket.key_mask.copy_((self._key_positions[None, :] <= bucket.positions[:, None])[:, None, None, :])
        if bucket.graph is not None and bucket.output is not None:
            bucket.graph.replay()
            return bucket.output[:num_rows].clone()
        return self._forward(bucket)[:num_rows]
