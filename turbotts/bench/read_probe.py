"""The bench's plain read loop (``kernels/read_probe.cpp``): prebuilt at install, else built at run time.

Why its own extension: only the roofline report times it, so the serving kernels carry none of it.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from types import ModuleType

from turbotts.cpu import extensions, variants
from turbotts.cpu.info import cpu_info
from turbotts.cpu.settings import cpu_settings

SOURCE = Path(__file__).with_name("kernels") / "read_probe.cpp"


@functools.cache
def load_read_probe() -> ModuleType | None:
    """The module with ``xor_words``; None where the CPU has no AVX2, or nothing is built and nothing can be."""
    if not variants.READ_PROBE_VARIANT.fits(cpu_info().flags):
        return None
    import torch  # noqa: F401  (the extension links against torch's libraries)

    try:
        return importlib.import_module("turbotts.bench._read_probe")
    except ImportError:
        settings = cpu_settings()
        return extensions.jit_build("read_probe", [SOURCE], [], settings) if settings.kernel_jit else None
