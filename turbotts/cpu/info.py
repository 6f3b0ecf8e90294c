"""What this CPU can do natively, read from ``/proc/cpuinfo`` flags.

Why: the same code runs several times faster or slower between a CPU with AVX-512 BF16
and one with AVX2 only, and bf16 without native support is emulated (slower
than fp32). Precision defaults (``auto``) and benchmark reports name the ISA
from here, so a figure always says which machine made it.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path

#: flags worth naming in a report, most capable first
_NAMED_FLAGS = ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx512f", "avx_vnni", "avx2")


@dataclass(frozen=True)
class CpuInfo:
    model_name: str
    flags: frozenset[str]

    @property
    def has_native_bf16(self) -> bool:
        """bf16 matmuls in hardware (AVX512-BF16 or AMX); elsewhere bf16 is emulated and slower than fp32."""
        return bool({"avx512_bf16", "amx_bf16"} & self.flags)

    @property
    def has_int8_dot(self) -> bool:
        """8-bit dot products in hardware (VNNI, or AMX int8)."""
        return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & self.flags)

    @property
    def isa(self) -> str:
        """The best vector ISA: ``amx``, ``avx512_bf16``, ``avx512_vnni``, ``avx512``, ``avx2`` or ``baseline``."""
        if {"amx_bf16", "amx_tile"} <= self.flags:
            return "amx"
        if "avx512_bf16" in self.flags:
            return "avx512_bf16"
        if "avx512_vnni" in self.flags:
            return "avx512_vnni"
        if "avx512f" in self.flags:
            return "avx512"
        return "avx2" if "avx2" in self.flags else "baseline"

    def report(self) -> dict[str, object]:
        """For benchmark JSON: the model name, the ISA and the flags that matter."""
        return {"model": self.model_name, "isa": self.isa, "flags": [f for f in _NAMED_FLAGS if f in self.flags]}


def parse_cpuinfo(text: str) -> CpuInfo:
    """The first processor's model name and flags from the text of ``/proc/cpuinfo``."""
    model_name, flags = platform.processor() or "unknown", frozenset[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model_name in ("", "unknown", platform.processor()):
            model_name = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return CpuInfo(model_name, flags)


@functools.cache
def cpu_info() -> CpuInfo:
    """This machine's CPU (empty flags where ``/proc/cpuinfo`` does not exist)."""
    try:
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text(encoding="ascii", errors="ignore"))
    except OSError:
        return CpuInfo(platform.processor() or "unknown", frozenset())
