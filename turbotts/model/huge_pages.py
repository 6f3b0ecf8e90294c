"""One buffer on transparent huge pages for the weights a decode step streams (Linux).

Why: a batch-1 int8 step reads its 190 MB of weight tiles once, front to back. On
4 KiB pages that is ~47 thousand TLB misses a step, and the hardware prefetchers
stop at every page boundary. On an AVX2-only AMD EPYC the 80 matmuls of a
full-size step took 10.1-10.6 ms on 4 KiB pages and 8.1-8.9 ms on 2 MiB pages
(median of 40 steps, four runs each), about a plain read of the same bytes.
The kernel asks for huge pages with ``madvise`` (the default THP mode);
where the kernel says no, or ``TURBOTTS_HUGE_PAGES=0``, the weights stay where
they were and nothing else changes.
"""

from __future__ import annotations

import logging
import mmap
import os
from pathlib import Path

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

#: ``TURBOTTS_HUGE_PAGES=0`` leaves the weights on the allocator's pages (for A/B runs)
DISABLE_ENV = "TURBOTTS_HUGE_PAGES"
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


def move_to_huge_pages(tensors: list[Tensor]) -> list[Tensor]:
    """The same values in one huge-page buffer, as views in order; the inputs where that cannot be had.

    The caller swaps its references for the views, so the old copies are freed one by one.
    """
    if os.environ.get(DISABLE_ENV, "1") == "0":
        logger.info("weights stay on the allocator's pages (%s=0)", DISABLE_ENV)
        return tensors
    if thp_mode() not in ("always", "madvise") or not hasattr(mmap, "MADV_HUGEPAGE"):
        logger.info("no transparent huge pages here: the int8 tiles stay on 4 KiB pages")
        return tensors
    if not tensors or any(t.device.type != "cpu" or not t.is_contiguous() for t in tensors):
        return tensors
    num_bytes = sum(t.nbytes for t in tensors)
    # private and anonymous (shared anonymous memory is shmem, which THP leaves alone by default); the
    # kernel backs the buffer's aligned 2 MiB spans with huge pages as they are first written
    buffer = mmap.mmap(-1, num_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buffer.madvise(mmap.MADV_HUGEPAGE)
    arena = torch.frombuffer(buffer, dtype=torch.uint8)  # keeps the mapping alive while any view does
    views = []
    offset = 0
    for tensor in tensors:
        view = arena[offset : offset + tensor.nbytes].view(tensor.dtype).view(tensor.shape)
        view.copy_(tensor)
        views.append(view)
        offset += tensor.nbytes
    logger.info(
        "int8 tiles on transparent huge pages: %.0f MiB asked, %.0f MiB granted",
        num_bytes / 2**20,
        (huge_page_bytes(arena) or 0) / 2**20,
    )
    return views


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
