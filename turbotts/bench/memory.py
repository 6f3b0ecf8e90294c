"""Peak resident memory of one phase of a benchmark, not of the whole process.

Why: one bench run loads several models in turn (``--quant none,auto``), and the
process's lifetime peak (``ru_maxrss``) would charge the last one with the first
one's memory. Linux lets a process reset its own peak (``VmHWM``) by writing 5 to
``/proc/self/clear_refs``; elsewhere the lifetime peak is the honest fallback,
and :func:`reset_peak_rss` says which one the figures are.
"""

from __future__ import annotations

import os
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak_rss() -> bool:
    """Start a new peak from the current resident size; False where the OS cannot."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_rss_bytes() -> int:
    """The peak since the last :func:`reset_peak_rss` (or since the process started)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    if os.name == "posix":
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    import psutil

    return int(psutil.Process().memory_info().rss)
