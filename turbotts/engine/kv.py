"""KV memory bookkeeping: budgeted slots (no torch here).

Design: the KV cache is a preallocated tensor per layer of shape
(num_slots, kv_heads, max_seq_len, head_dim); a running sequence owns one slot.
The number of slots is derived from a byte budget, so the cache can never grow
past it, whatever arrives.

Why slots rather than paged blocks: on CPU (our main target here) attention
reads a slot's contiguous cache in place, while paged attention must gather
blocks into a contiguous buffer every layer of every step, which costs more
memory traffic than the attention itself. A TTS request's size is bounded when
it is admitted (prompt + max_new_tokens <= max_seq_len), so reserving a slot up
front never needs preemption. The price is internal fragmentation for short
utterances; ``max_seq_len`` is the knob that trades it against the longest
utterance one segment may produce (long text is cut into segments upstream).
"""

from __future__ import annotations

from dataclasses import dataclass

from turbotts.errors import EngineError


@dataclass(frozen=True)
class KVLayout:
    """What the budget bought: measured once at start-up, never changed."""

    num_slots: int
    max_seq_len: int
    bytes_per_token: int

    @property
    def total_bytes(self) -> int:
        return self.num_slots * self.max_seq_len * self.bytes_per_token


def plan_kv_layout(*, budget_bytes: int, max_seq_len: int, bytes_per_token: int, max_slots: int) -> KVLayout:
    """Fit as many slots as the byte budget allows, at most ``max_slots``.

    Raises:
        EngineError: the budget cannot hold even one slot of ``max_seq_len`` tokens.
    """
    slot_bytes = max_seq_len * bytes_per_token
    num_slots = min(max_slots, budget_bytes // slot_bytes)
    if num_slots < 1:
        raise EngineError(
            f"KV budget of {budget_bytes / 2**20:.0f} MiB cannot hold one sequence of {max_seq_len} tokens "
            f"({slot_bytes / 2**20:.0f} MiB); raise --kv-budget-mb or lower --max-seq-len"
        )
    return KVLayout(num_slots=num_slots, max_seq_len=max_seq_len, bytes_per_token=bytes_per_token)


class SlotAllocator:
    """Hands out KV slots; lowest free slot first so the hot set stays compact."""

    def __init__(self, num_slots: int) -> None:
        self._free = list(range(num_slots - 1, -1, -1))
        self._num_slots = num_slots

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self._num_slots - len(self._free)

    def can_allocate(self) -> bool:
        return bool(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise EngineError("no free KV slot; call can_allocate() first")
        return self._free.pop()

    def free(self, slot: int) -> None:
        if not 0 <= slot < self._num_slots or slot in self._free:
            raise EngineError(f"slot {slot} is not allocated")
        self._free.append(slot)
        self._free.sort(reverse=True)
