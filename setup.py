"""Builds the C++ CPU kernels at install: one extension per ISA variant (turbotts/cpu/variants.py).

Why here and not at the first request: a machine or image with no compiler then still runs the
kernels, and no replica pays a 30-120 s compile at start. Metadata lives in pyproject.toml; this
file only declares the extensions. ``TURBOTTS_BUILD_KERNELS=0`` builds a pure-Python package
(the kernels are then compiled at first use where a compiler exists). Build with the torch you run
(``pip install --no-build-isolation``, as scripts/setup.sh does): an extension loads only into
the torch it was compiled against.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent


def _variants_module():
    spec = importlib.util.spec_from_file_location("_turbotts_variants", ROOT / "turbotts" / "cpu" / "variants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _extensions() -> tuple[list, dict]:
    if os.environ.get("TURBOTTS_BUILD_KERNELS", "1") == "0" or platform.machine() not in ("x86_64", "AMD64"):
        return [], {}
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    v = _variants_module()
    kernels = Path("turbotts/cpu/kernels")

    def extension(kind: str, variant, sources) -> CppExtension:
        return CppExtension(
            v.module_name(kind, variant),
            [str(path) for path in sources],
            extra_compile_args=[*v.COMMON_FLAGS, *variant.arch_flags],
            extra_link_args=["-fopenmp"],
        )

    extensions = [extension("kernels", variant, [kernels / s for s in v.KERNEL_SOURCES]) for variant in v.VARIANTS]
    extensions.append(extension("sampler", v.SAMPLER_VARIANT, [kernels / s for s in v.SAMPLER_SOURCES]))
    read_probe = extension("read_probe", v.READ_PROBE_VARIANT, [Path("turbotts/bench/kernels/read_probe.cpp")])
    read_probe.name = "turbotts.bench._read_probe"
    extensions.append(read_probe)
    class BuildVariants(BuildExtension):
        """Each extension in a build folder of its own: the variants compile the same sources, and objects
        in one shared folder would collide (or link one variant's code into another: illegal instructions)."""

        def build_extension(self, ext: CppExtension) -> None:
            shared = self.build_temp
            self.build_temp = os.path.join(shared, ext.name)
            try:
                super().build_extension(ext)
            finally:
                self.build_temp = shared

    return extensions, {"build_ext": BuildVariants.with_options(use_ninja=True)}


ext_modules, cmdclass = _extensions()
# one extension at a time (BuildVariants switches the build folder per extension); ninja compiles each
# extension's sources in parallel
setup(ext_modules=ext_modules, cmdclass=cmdclass)
