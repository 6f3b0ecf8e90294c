"""The prebuilt kernel variants: one build per x86 ISA level, picked at run time from the CPU's flags.

Why several builds: the int8 kernels are written for AVX2 and for AVX-512 (``kernels/int8_tiles.h``
picks its code by the compiler's target), and a build runs only where its instructions exist. The
wheel carries each variant, compiled at install (``setup.py``), and :func:`pick` takes the best one
this CPU can run, as PyTorch and llama.cpp do; the run-time compiler is only a fallback.

No AMX variant: our kernels stream weights for one to three rows, where AMX's 16-row tiles do not
pay; an AMX CPU runs the ``avx512_vnni`` build, and oneDNN uses AMX for prefill-sized matmuls.

This module imports nothing but the standard library: ``setup.py`` reads it to build the variants.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: /proc/cpuinfo flags of x86-64-v3 (AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE) and x86-64-v4 (AVX-512 F/BW/CD/DQ/VL)
X86_64_V3 = frozenset({"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "abm", "movbe"})
X86_64_V4 = X86_64_V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


@dataclass(frozen=True)
class Variant:
    """One build of the kernels: its name, the CPU flags it needs and the compiler flags that make it."""

    name: str
    needs: frozenset[str]
    arch_flags: tuple[str, ...]

    def fits(self, cpu_flags: Iterable[str]) -> bool:
        return self.needs <= set(cpu_flags)


#: best first: :func:`pick` takes the first that fits
VARIANTS = (
    Variant("avx512_vnni", X86_64_V4 | {"avx512_vnni"}, ("-march=x86-64-v4", "-mavx512vnni")),
    Variant("avx512", X86_64_V4, ("-march=x86-64-v4",)),
    Variant("avx2_vnni", X86_64_V3 | {"avx_vnni"}, ("-march=x86-64-v3", "-mavxvnni")),
    Variant("avx2", X86_64_V3, ("-march=x86-64-v3",)),
)
#: the per-row sampler is scalar C++: one build, for every CPU the kernels run on
SAMPLER_VARIANT = VARIANTS[-1]
#: the bench's read probe uses AVX2 loads
READ_PROBE_VARIANT = VARIANTS[-1]
#: compiler flags of every build: hidden symbols, so two variants in one process never bind to each other's
COMMON_FLAGS = ("-O3", "-fopenmp", "-fvisibility=hidden")
#: sources and headers in ``turbotts/cpu/kernels``; the module file of each binds the rest for Python
KERNEL_SOURCES = ("kernels_module.cpp", "int8_gemv.cpp", "decode_stack.cpp")
KERNEL_HEADERS = ("int8_gemv.h", "int8_tiles.h", "decode_stack.h")
SAMPLER_SOURCES = ("sampler_module.cpp", "sample_rows.cpp")
SAMPLER_HEADERS = ("sample_rows.h",)


def by_name(name: str) -> Variant:
    """The variant called ``name``.

    Raises:
        KeyError: no such variant (the message lists them).
    """
    for variant in VARIANTS:
        if variant.name == name:
            return variant
    raise KeyError(f"no kernel variant {name!r}; variants: {', '.join(v.name for v in VARIANTS)}")


def pick(cpu_flags: Iterable[str]) -> Variant | None:
    """The best variant a CPU with ``cpu_flags`` runs, or None (no AVX2: no prebuilt variant fits)."""
    flags = set(cpu_flags)
    return next((variant for variant in VARIANTS if variant.fits(flags)), None)


def module_name(kind: str, variant: Variant) -> str:
    """The import name of a prebuilt extension: ``turbotts.cpu._kernels_avx2``, ``turbotts.cpu._sampler_avx2``."""
    return f"turbotts.cpu._{kind}_{variant.name}"
