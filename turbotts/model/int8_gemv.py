"""The int8 decode kernel (``kernels/int8_gemv.cpp``), compiled for this CPU on first use.

Why a kernel of our own: a decode step of a few rows is a chain of
matrix-vector products, bound by how fast the int8 weights stream from memory.
fbgemm's dynamic int8 linear streams them at well under the machine's bandwidth
at one row (17 GB/s against 48 GB/s on a 2-core AMD EPYC with AVX-512); this
kernel reads each weight byte once, in one sequential stream per thread, and
measured 1.4-1.6x faster per matmul there. Larger batches stay on fbgemm,
whose VNNI multiply does 4x the work per instruction.

Why compiled at run time: ``-march=native`` picks AVX-512 or AVX2 code for the
CPU that runs it. The build is cached, keyed here by the source and the CPU's
flags, so only the first start pays the 30-40 s compile. The cache lives in
:func:`build_directory`: ``$TURBOTTS_CACHE_DIR/torch_extensions``, else the source
checkout's ``.cache/torch_extensions``, else torch's own (``TORCH_EXTENSIONS_DIR``,
by default ``~/.cache/torch_extensions``). Why per checkout: two checkouts that
shared torch's one folder queued behind each other's build lock and kept each
other's stale builds. Where there is no C++ compiler, or the build fails, or
``TURBOTTS_INT8_GEMV=0``, :func:`load_kernel` returns None, logs why once, and
every int8 linear runs on fbgemm alone.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

from turbotts.cpu import cpu_info

logger = logging.getLogger(__name__)

KERNELS = Path(__file__).with_name("kernels")
#: the extension: the matmul entry points and module (first), the fused decode stack, their shared tile code,
#: and the per-row sampler the engine runs beside them
SOURCES = [KERNELS / "int8_gemv.cpp", KERNELS / "decode_stack.cpp", KERNELS / "sample_rows.cpp"]
HEADERS = [KERNELS / "int8_tiles.h", KERNELS / "decode_stack.h", KERNELS / "sample_rows.h"]
#: rows per call that go to the kernel (the C++ side takes up to 4): measured 1.22x, 1.11x, 1.09x and
#: 0.94x the fbgemm step at 1 to 4 rows (full-size int8 GPT, 2-core AMD EPYC, AVX-512)
MAX_ROWS = 3
#: the kernel's weight tiles: N a multiple of TILE_N, K of CHUNK_K
TILE_N = 4
CHUNK_K = 32
DISABLE_ENV = "TURBOTTS_INT8_GEMV"
CACHE_ENV = "TURBOTTS_CACHE_DIR"


def fits(out_features: int, in_features: int) -> bool:
    """Whether a weight of this shape can be packed for the kernel."""
    return out_features % TILE_N == 0 and in_features % CHUNK_K == 0


@functools.cache
def load_kernel() -> ModuleType | None:
    """The compiled kernel module, or None (with the reason logged) where it cannot be used here."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        logger.info("int8 decode kernel off (%s=0): int8 linears run on fbgemm", DISABLE_ENV)
        return None
    flags = cpu_info().flags
    if "avx2" not in flags:
        logger.info("int8 decode kernel needs AVX2 (this CPU has none): int8 linears run on fbgemm")
        return None
    return build(["-O3", "-march=native"])


def build_directory(name: str) -> Path | None:
    """Where the build ``name`` is compiled and cached, or None for torch's default (see the module docstring)."""
    checkout = Path(__file__).resolve().parents[2]  # a source checkout (``pip install -e .``) has pyproject.toml
    if os.environ.get(CACHE_ENV):
        cache = Path(os.environ[CACHE_ENV])
    elif (checkout / "pyproject.toml").is_file():
        cache = checkout / ".cache"
    else:
        return None  # installed as a package: torch's folder
    import torch

    # python and torch in the path, as in torch's default folder: a build loads only into their ABI
    abi = f"py{sys.version_info.major}{sys.version_info.minor}_torch{torch.__version__}"
    return cache / "torch_extensions" / abi / name


def build(arch_flags: list[str]) -> ModuleType | None:
    """Compile (or load from the cache) the kernel with ``arch_flags``; None where that fails."""
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        logger.warning("int8 decode kernel not built: no C++ compiler (c++) on PATH; int8 linears run on fbgemm")
        return None
    from torch.utils import cpp_extension

    # hidden: the native and the portable build may share a process without binding to each other's symbols
    cflags = [*arch_flags, "-fopenmp", "-fvisibility=hidden"]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in [*SOURCES, *HEADERS]))
    digest.update(" ".join([*cflags, *sorted(cpu_info().flags)]).encode())
    name = f"turbotts_int8_gemv_{digest.hexdigest()[:12]}"
    directory = build_directory(name)
    try:
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        module: ModuleType = cpp_extension.load(
            name,
            [str(path) for path in SOURCES],
            extra_cflags=cflags,
            extra_ldflags=["-fopenmp"],
            build_directory=None if directory is None else str(directory),
            verbose=False,
        )
    except (OSError, RuntimeError, ImportError) as exc:  # a compiler or linker error
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        logger.warning("int8 decode kernel not built (%s); int8 linears run on fbgemm", first_line[:200])
        return None
    logger.info("int8 decode kernel ready (%s code)", module.isa())
    return module
