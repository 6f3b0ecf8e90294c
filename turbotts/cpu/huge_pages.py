"""One buffer on transparent huge pages for the weights a decode step streams (Linux).

Why: a batch-1 int8 step reads its 190 MB of weight tiles once, front to back. On
4 KiB pages that is ~47 thousand TLB misses a step, and the hardware prefetchers
stop at every page boundary. On 2 MiB pages the matmuls stream uninterrupted, so
a loop of a step's matmuls alone gains clearly; the real fused step, whose other
work breaks the stream at every layer, gains less, but consistently.
The kernel asks for huge pages with ``madvise`` (the default THP mode);
where the kernel says no, or ``TURBOTTS_HUGE_PAGES=0``, the weights stay where
they were and nothing else changes.
"""

from __future__ import annotations

import logging
import mmap
from pathlib import Path

import torch
from torch import Tensor

from turbotts.cpu.settings import SWITCHES, cpu_settings

logger = logging.getLogger(__name__)

#: ``TURBOTTS_HUGE_PAGES=0`` leaves the weights on the allocator's pages (for A/B runs)
DISABLE_ENV = SWITCHES["huge_pages"][0]
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")
SMAPS = Path("/proc/self/smaps")


def thp_mode() -> str | None:
    """The kernel's transparent huge page mode (always, madvise or never); None where there is none."""
    try:
        text = THP_SETTING.read_text()
    except OSError:
        return None
    chosen = [word for word in text.split() if word.startswith("[")]
    return chosen[0].strip("[]") if chosen else None


class HugePageBuffer:
    """One anonymous mapping on huge pages that tensors are copied into, back to back.

    Callers swap each reference for its copy as they go (:meth:`place`), so at most one
    old copy is alive beside the buffer: moving the 190 MB of tiles adds one matrix
    to the peak, not the whole set.
    """

    def __init__(self, num_bytes: int) -> None:
        # private and anonymous (shared anonymous memory is shmem, which THP leaves alone by default); the
        # kernel backs the buffer's aligned 2 MiB spans with huge pages as they are first written
        mapping = mmap.mmap(-1, num_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        mapping.madvise(mmap.MADV_HUGEPAGE)
        self.bytes = torch.frombuffer(mapping, dtype=torch.uint8)  # keeps the mapping alive while a view does
        self._offset = 0

    @classmethod
    def create(cls, num_bytes: int) -> HugePageBuffer | None:
        """A buffer of ``num_bytes``; None where huge pages are off or switched off (the reason logged)."""
        if not cpu_settings().huge_pages:
            logger.info("weights stay on the allocator's pages (%s=0)", DISABLE_ENV)
            return None
        if thp_mode() not in ("always", "madvise") or not hasattr(mmap, "MADV_HUGEPAGE"):
            logger.info("no transparent huge pages here: the int8 tiles stay on 4 KiB pages")
            return None
        return cls(num_bytes)

    def place(self, tensor: Tensor) -> Tensor:
        """A copy of ``tensor`` (CPU, contiguous) in the next free bytes of the buffer."""
        end = self._offset + tensor.nbytes
        if end > self.bytes.numel() or tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise ValueError("HugePageBuffer.place: a contiguous CPU tensor that fits in what is left")
        view = self.bytes[self._offset : end].view(tensor.dtype).view(tensor.shape)
        view.copy_(tensor)
        self._offset = end
        return view


def huge_page_bytes(tensor: Tensor) -> int | None:
    """Bytes of huge pages behind the mapping that holds ``tensor``'s memory (None off Linux)."""
    address = tensor.data_ptr()
    try:
        lines = SMAPS.read_text().splitlines()
    except OSError:
        return None
    in_mapping = False
    for line in lines:
        head = line.split(maxsplit=1)[0] if line else ""
        if "-" in head and not head.endswith(":"):  # a mapping's header: start-end perms ...
            start, end = (int(part, 16) for part in head.split("-"))
            in_mapping = start <= address < end
        elif in_mapping and head == "AnonHugePages:":
            return int(line.split()[1]) * 1024
    return 0
