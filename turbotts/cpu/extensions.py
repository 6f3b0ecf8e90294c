"""Loads the C++ extensions: the prebuilt variant for this CPU, else a run-time build, logged once.

Why prebuilt: ``pip install`` compiles one variant per ISA level (``setup.py``,
:mod:`turbotts.cpu.variants`), so a machine or container with no compiler runs the kernels and
no start pays a compile. The run-time build (``-march=native``, torch's extension builder) is
only the fallback for a CPU no variant fits, or an install built without kernels; it is cached
in :func:`jit_directory`, one folder per install, so two checkouts never rebuild each other's.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from turbotts.cpu import variants
from turbotts.cpu.info import cpu_info
from turbotts.cpu.settings import VARIANT_ENV, CpuSettings, cpu_settings

logger = logging.getLogger(__name__)

KERNELS_DIR = Path(__file__).with_name("kernels")
_PACKAGE = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Loaded:
    """An extension as loaded here: the module (None: not available), and which build and why."""

    module: ModuleType | None
    #: the prebuilt variant's name, ``native`` for a run-time build, ``none`` where there is no module
    variant: str
    #: ``prebuilt``, ``jit`` or ``none``
    source: str
    why: str

    @property
    def isa(self) -> str:
        """The vector code the module runs (the kernels' own ``isa()``), else the variant's name."""
        if self.module is not None and hasattr(self.module, "isa"):
            return str(self.module.isa())
        return self.variant

    def report(self) -> dict[str, str]:
        return {"variant": self.variant, "isa": self.isa, "source": self.source, "why": self.why}


def jit_directory(name: str, settings: CpuSettings | None = None) -> Path:
    """Where the run-time build ``name`` is compiled and cached.

    ``$TURBOTTS_CACHE_DIR/torch_extensions``; else a source checkout's ``.cache``; else
    ``~/.cache/turbotts/<install>``, keyed by the installed package's path. Python and torch
    versions are in the path too: a build loads only into their ABI.
    """
    import torch

    settings = settings or cpu_settings()
    checkout = _PACKAGE.parent
    if settings.cache_dir is not None:
        cache = settings.cache_dir
    elif (checkout / "pyproject.toml").is_file():
        cache = checkout / ".cache"
    else:
        cache = Path.home() / ".cache" / "turbotts" / hashlib.sha256(str(_PACKAGE).encode()).hexdigest()[:12]
    abi = f"py{sys.version_info.major}{sys.version_info.minor}_torch{torch.__version__}"
    return cache / "torch_extensions" / abi / name


def import_prebuilt(kind: str, variant: variants.Variant) -> ModuleType:
    """The prebuilt extension ``kind`` (``kernels``, ``sampler``) of ``variant``.

    Raises:
        ImportError: not built in this install, or built against another torch.
    """
    import torch  # noqa: F401  (the extension links against torch's libraries, loaded by importing it)

    return importlib.import_module(variants.module_name(kind, variant))


def jit_build(name: str, sources: list[Path], headers: list[Path], settings: CpuSettings) -> ModuleType | None:
    """Compile (or load from :func:`jit_directory`) ``sources`` for this CPU; None, with the reason
    logged, where there is no compiler or the build fails."""
    if shutil.which(settings.compiler) is None:
        logger.warning("%s not built at run time: no C++ compiler (%s) on PATH", name, settings.compiler)
        return None
    from torch.utils import cpp_extension

    cflags = [*variants.COMMON_FLAGS, "-march=native"]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in [*sources, *headers]))
    digest.update(" ".join([*cflags, *sorted(cpu_info().flags)]).encode())
    module_name = f"turbotts_{name}_{digest.hexdigest()[:12]}"
    directory = jit_directory(module_name, settings)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        module: ModuleType = cpp_extension.load(
            module_name,
            [str(path) for path in sources],
            extra_cflags=cflags,
            extra_ldflags=["-fopenmp"],
            build_directory=str(directory),
            verbose=False,
        )
    except (OSError, RuntimeError, ImportError) as exc:  # a compiler or linker error
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        logger.warning("%s not built at run time (%s)", name, first_line[:200])
        return None
    return module


def _why_prebuilt(settings: CpuSettings, fixed: variants.Variant | None) -> str:
    if fixed is not None:
        return "its one build"
    if settings.kernel_variant is not None:
        return f"{VARIANT_ENV}={settings.kernel_variant}"
    return "the best variant this CPU runs"


def _load(kind: str, sources: tuple[str, ...], headers: tuple[str, ...], fixed: variants.Variant | None) -> Loaded:
    """The best prebuilt ``kind`` this CPU runs, else a run-time build. ``fixed``: the one variant
    ``kind`` is built in (the sampler), else the best of :data:`variants.VARIANTS`."""
    settings = cpu_settings()
    flags = cpu_info().flags
    chosen = variants.pick(flags) if fixed is None else (fixed if fixed.fits(flags) else None)
    if settings.kernel_variant is not None:  # asked for by name: that one or nothing
        try:
            wanted = variants.by_name(settings.kernel_variant)
        except KeyError as exc:
            return Loaded(None, "none", "none", str(exc.args[0]))
        if not wanted.fits(flags):
            missing = ", ".join(sorted(wanted.needs - flags))
            return Loaded(None, "none", "none", f"variant {wanted.name} needs {missing}, which this CPU lacks")
        chosen = wanted if fixed is None else chosen
    why = "no prebuilt variant fits this CPU"
    if chosen is not None:
        try:
            return Loaded(import_prebuilt(kind, chosen), chosen.name, "prebuilt", _why_prebuilt(settings, fixed))
        except ImportError as exc:
            why = f"the prebuilt {chosen.name} variant does not load ({str(exc)[:160]})"
    if "avx2" not in flags:
        return Loaded(None, "none", "none", "the kernels need AVX2 (this CPU has none)")
    if not settings.kernel_jit:
        return Loaded(None, "none", "none", f"{why}, and {settings.why_off('kernel_jit')}")
    logger.warning("C++ %s: %s; compiling them for this CPU at run time (once per install)", kind, why)
    built = jit_build(kind, [KERNELS_DIR / s for s in sources], [KERNELS_DIR / h for h in headers], settings)
    if built is None:
        return Loaded(None, "none", "none", f"{why}, and the run-time build failed (see the log)")
    return Loaded(built, "native", "jit", why)


@functools.cache
def load_kernels() -> Loaded:
    """The int8 matmul kernels and fused decode stack (cached per process; tests clear the cache)."""
    settings = cpu_settings()
    if not settings.int8_gemv:
        loaded = Loaded(None, "none", "none", settings.why_off("int8_gemv"))
    else:
        loaded = _load("kernels", variants.KERNEL_SOURCES, variants.KERNEL_HEADERS, None)
    level = logging.INFO if loaded.module is not None or not settings.int8_gemv else logging.WARNING
    logger.log(level, "CPU kernels: %s (%s, %s): %s", loaded.variant, loaded.isa, loaded.source, loaded.why)
    return loaded


@functools.cache
def load_sampler() -> Loaded:
    """The per-row sampler (one build: scalar code, see :data:`variants.SAMPLER_VARIANT`)."""
    return _load("sampler", variants.SAMPLER_SOURCES, variants.SAMPLER_HEADERS, variants.SAMPLER_VARIANT)


def clear_caches() -> None:
    """Forget what was loaded, so the next call reads the switches again (tests)."""
    load_kernels.cache_clear()
    load_sampler.cache_clear()
