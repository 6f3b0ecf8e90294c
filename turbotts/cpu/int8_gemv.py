"""The int8 decode kernel (``kernels/int8_gemv.cpp``): what it takes, and the loaded build.

Why a kernel of our own: a decode step of a few rows is a chain of matrix-vector products,
bound by how fast the int8 weights stream from memory. fbgemm's dynamic int8 linear streams
them well under the machine's bandwidth at one row; this kernel reads each weight byte once,
in one sequential stream per thread. Larger batches stay on fbgemm, whose VNNI multiply does
4x the work per instruction. Which build runs (a prebuilt ISA variant, or a run-time build) is
:mod:`turbotts.cpu.extensions`'s business; where none loads, every int8 linear runs on fbgemm.
"""

from __future__ import annotations

from types import ModuleType

from turbotts.cpu.extensions import load_kernels
from turbotts.cpu.settings import SWITCHES

DISABLE_ENV = SWITCHES["int8_gemv"][0]
#: rows per call that go to the kernel (the C++ side takes up to 4): at 4 rows fbgemm's step is as fast
MAX_ROWS = 3
#: the kernel's weight tiles: N a multiple of TILE_N, K of CHUNK_K
TILE_N = 4
CHUNK_K = 32


def fits(out_features: int, in_features: int) -> bool:
    """Whether a weight of this shape can be packed for the kernel."""
    return out_features % TILE_N == 0 and in_features % CHUNK_K == 0


def load_kernel() -> ModuleType | None:
    """The loaded kernel module, or None (the reason logged once) where none can be used here."""
    return load_kernels().module
