"""The CPU speed path's switches, read from the environment in one place.

Why environment variables: the switches are for A/B runs and for working around a
machine (``TURBOTTS_INT8_GEMV=0 turbotts bench ...``), and they must reach Ray
workers and subprocesses that never see a CLI flag. Why one place: a switch read
deep in a module is one nobody finds; here each is named, typed and documented, and
the configuration reference lists them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: switch name -> (environment variable, what turning it off does)
SWITCHES = {
    "int8_gemv": ("TURBOTTS_INT8_GEMV", "0: every int8 matmul runs on fbgemm (no weight-streaming kernel)"),
    "decode_stack": ("TURBOTTS_DECODE_STACK", "0: int8 decode steps run layer by layer (no fused C++ step)"),
    "onednn_prefill": ("TURBOTTS_ONEDNN_PREFILL", "0: int8 prefill stays on fbgemm (oneDNN is never probed)"),
    "huge_pages": ("TURBOTTS_HUGE_PAGES", "0: int8 weight tiles stay on the allocator's pages"),
    "fused_sampler": ("TURBOTTS_FUSED_SAMPLER", "0: sample with torch ops even where the C++ sampler is built"),
    "kernel_jit": ("TURBOTTS_KERNEL_JIT", "0: never compile kernels at run time (no prebuilt variant: fbgemm)"),
}
#: the prebuilt kernel variant to load instead of the best one for this CPU (A/B runs, tests)
VARIANT_ENV = "TURBOTTS_KERNEL_VARIANT"
#: where run-time builds are cached (per install, see :func:`turbotts.cpu.extensions.jit_directory`)
CACHE_ENV = "TURBOTTS_CACHE_DIR"


@dataclass(frozen=True)
class CpuSettings:
    """Each switch is on unless its variable is ``0``."""

    int8_gemv: bool = True
    decode_stack: bool = True
    onednn_prefill: bool = True
    huge_pages: bool = True
    fused_sampler: bool = True
    kernel_jit: bool = True
    kernel_variant: str | None = None
    cache_dir: Path | None = None
    compiler: str = "c++"

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> CpuSettings:
        switches = {name: environ.get(var, "1") != "0" for name, (var, _) in SWITCHES.items()}
        return cls(
            **switches,
            kernel_variant=environ.get(VARIANT_ENV) or None,
            cache_dir=Path(environ[CACHE_ENV]).expanduser() if environ.get(CACHE_ENV) else None,
            compiler=environ.get("CXX") or "c++",
        )

    def why_off(self, name: str) -> str:
        """``VAR=0``, for the log line of a switch that is off."""
        return f"{SWITCHES[name][0]}=0"


def cpu_settings() -> CpuSettings:
    """The switches as the environment sets them now (read on each call: cheap, and tests change them)."""
    return CpuSettings.from_env(os.environ)
