"""Which C++ build runs: the prebuilt variant the CPU's flags pick, a named one, or the run-time build.

The subprocess tests run a copy of the installed package with no compiler to be found (the
prebuilt kernels must load and nothing be compiled), and a copy without the prebuilt files (the
run-time build must take over, say so once, and cache under ``TURBOTTS_CACHE_DIR``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.required_tools import REPO
from turbotts.cpu import extensions, variants
from turbotts.cpu.info import cpu_info
from turbotts.cpu.settings import VARIANT_ENV, CpuSettings

V3 = set(variants.X86_64_V3)
V4 = set(variants.X86_64_V4)


@pytest.mark.parametrize(
    ("flags", "want"),
    [
        (V4 | {"avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8"}, "avx512_vnni"),  # Sapphire Rapids
        (V4 | {"avx512_vnni", "avx512_bf16"}, "avx512_vnni"),  # Zen 4
        (V4, "avx512"),  # Skylake-SP
        (V3 | {"avx_vnni"}, "avx2_vnni"),  # Alder Lake
        (V3, "avx2"),  # Zen 1-3, Haswell
        (V3 - {"fma"}, None),  # AVX2 without FMA: no variant, the run-time build
        ({"sse4_2"}, None),
    ],
)
def test_the_best_variant_a_cpu_runs_is_picked(flags: set[str], want: str | None) -> None:
    picked = variants.pick(flags)
    assert (picked.name if picked else None) == want


def test_a_variant_by_name_and_an_unknown_name() -> None:
    assert variants.by_name("avx2").arch_flags == ("-march=x86-64-v3",)
    with pytest.raises(KeyError, match="avx512_vnni, avx512, avx2_vnni, avx2"):
        variants.by_name("avx9")


def _fitting() -> list[variants.Variant]:
    return [v for v in variants.VARIANTS if v.fits(cpu_info().flags)]


@pytest.mark.usefixtures("int8_kernel")
def test_every_variant_this_cpu_runs_computes_the_same_matmul() -> None:
    """Each prebuilt variant is in the install and agrees with the others to float rounding."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randint(-127, 128, (256, 512), dtype=torch.int8, generator=generator)
    scale, x = torch.rand(256, generator=generator) / 100, torch.randn(2, 512, generator=generator)
    results = {}
    for variant in _fitting():
        module = extensions.import_prebuilt("kernels", variant)
        assert module.isa().startswith("avx512bw" if variant.name.startswith("avx512") else "avx2")
        assert ("vnni" in module.isa()) == variant.name.endswith("vnni")
        results[variant.name] = module.gemv(x, module.pack(q), scale)
    assert results, "no variant fits this CPU"
    first = next(iter(results.values()))
    for got in results.values():
        torch.testing.assert_close(got, first, rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("int8_kernel")
def test_a_variant_named_in_the_environment_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIANT_ENV, "avx2")
    extensions.clear_caches()
    try:
        loaded = extensions.load_kernels()
        assert (loaded.variant, loaded.isa, loaded.source) == ("avx2", "avx2", "prebuilt")
        assert VARIANT_ENV in loaded.why
        monkeypatch.setenv(VARIANT_ENV, "avx9")
        extensions.clear_caches()
        refused = extensions.load_kernels()
        assert refused.module is None and "no kernel variant 'avx9'" in refused.why
        missing = [v for v in variants.VARIANTS if not v.fits(cpu_info().flags)]
        if missing:  # a variant this CPU cannot run is refused, never loaded to crash on an illegal instruction
            monkeypatch.setenv(VARIANT_ENV, missing[0].name)
            extensions.clear_caches()
            assert "which this CPU lacks" in extensions.load_kernels().why
    finally:
        monkeypatch.delenv(VARIANT_ENV)
        extensions.clear_caches()


def test_run_time_builds_are_cached_per_install(tmp_path: Path) -> None:
    """In TURBOTTS_CACHE_DIR where set, else in the checkout: two checkouts never share a build."""
    name = "turbotts_kernels_x"
    in_checkout = extensions.jit_directory(name, CpuSettings())
    assert in_checkout.is_relative_to(REPO / ".cache" / "torch_extensions")
    abi = in_checkout.parent.name  # python and torch: a build loads only into their ABI
    assert in_checkout.name == name and torch.__version__ in abi
    assert extensions.jit_directory(name, CpuSettings(cache_dir=tmp_path)) == tmp_path / "torch_extensions" / abi / name


def _package_copy(tmp_path: Path, *, with_prebuilt: bool) -> Path:
    """The installed package copied under ``tmp_path/site`` (with or without the compiled files)."""
    site = tmp_path / "site"
    ignore = shutil.ignore_patterns("__pycache__", *(() if with_prebuilt else ("*.so",)))
    shutil.copytree(REPO / "turbotts", site / "turbotts", ignore=ignore)
    return site


def _no_compiler_env(tmp_path: Path, site: Path) -> dict[str, str]:
    """PATH holds only this Python, CXX points nowhere: no compiler can be found."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    return {**os.environ, "PATH": str(bin_dir), "CXX": str(tmp_path / "no-compiler"), "PYTHONPATH": str(site),
            "TURBOTTS_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip


def _run(code: str, env: dict[str, str], cwd: Path) -> tuple[dict[str, object], str]:
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


LOAD_AND_RUN = """
import json, logging, torch, turbotts
logging.basicConfig(level=logging.INFO)
from turbotts.cpu import extensions
from turbotts.cpu.quant import Int8Linear
kernels, sampler = extensions.load_kernels(), extensions.load_sampler()
linear = Int8Linear([torch.randn(64, 128)])
out = linear(torch.randn(1, 128))
print(json.dumps({"package": turbotts.__file__, "kernels": kernels.report(), "sampler": sampler.report(),
                  "kernel_ran": linear.kernel is not None and out.shape == (1, 64)}))
"""


@pytest.mark.usefixtures("int8_kernel")
def test_with_no_compiler_the_installed_kernels_run_and_nothing_is_compiled(tmp_path: Path) -> None:
    site = _package_copy(tmp_path, with_prebuilt=True)
    report, _ = _run(LOAD_AND_RUN, _no_compiler_env(tmp_path, site), tmp_path)
    assert str(report["package"]).startswith(str(site))  # the copy, not the checkout
    assert (
        report["kernels"]["source"] == "prebuilt"
        and report["kernels"]["variant"]
        == variants.pick(  # type: ignore[index]
            cpu_info().flags
        ).name
    )  # type: ignore[union-attr]
    assert report["sampler"]["source"] == "prebuilt" and report["kernel_ran"] is True  # type: ignore[index]
    assert not (tmp_path / "cache").exists()  # nothing was built


@pytest.mark.usefixtures("int8_kernel")
def test_with_no_compiler_and_nothing_prebuilt_int8_runs_on_fbgemm(tmp_path: Path) -> None:
    site = _package_copy(tmp_path, with_prebuilt=False)
    report, log = _run(LOAD_AND_RUN, _no_compiler_env(tmp_path, site), tmp_path)
    assert report["kernels"]["source"] == "none" and report["kernel_ran"] is False  # type: ignore[index]
    assert "does not load" in report["kernels"]["why"] and "no C++ compiler" in log  # type: ignore[index]


@pytest.mark.usefixtures("sampler_kernel")
def test_without_a_prebuilt_file_the_run_time_build_takes_over_and_says_so_once(tmp_path: Path) -> None:
    site = _package_copy(tmp_path, with_prebuilt=False)
    env = {**os.environ, "PYTHONPATH": str(site), "TURBOTTS_CACHE_DIR": str(tmp_path / "cache")}
    code = """
import json, logging
logging.basicConfig(level=logging.INFO)
from turbotts.cpu import extensions
first = extensions.load_sampler(); extensions.load_sampler()
print(json.dumps(first.report()))
"""
    report, log = _run(code, env, tmp_path)
    assert (report["variant"], report["source"]) == ("native", "jit")
    assert log.count("compiling them for this CPU at run time") == 1
    assert any((tmp_path / "cache" / "torch_extensions").rglob("*.so"))


def test_the_loaded_report_names_the_build(int8_kernel: ModuleType) -> None:
    report = extensions.load_kernels().report()
    assert report["isa"] == int8_kernel.isa() and report["source"] in ("prebuilt", "jit")


def _machine_code(kind: str, variant: variants.Variant) -> str:
    """The disassembly of a prebuilt extension, found without importing it (an AVX-512 build may not load here)."""
    spec = importlib.util.find_spec(variants.module_name(kind, variant))
    assert spec is not None and spec.origin is not None, f"{kind} {variant.name} is not installed"
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", spec.origin], capture_output=True, text=True,
                          check=True, timeout=120).stdout  # fmt: skip


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump (binutils) to read the machine code")
@pytest.mark.usefixtures("int8_kernel")
def test_the_avx2_builds_hold_no_avx512_instruction() -> None:
    """What an AVX2-only CPU loads must not carry one AVX-512 instruction (a zmm register): the variants
    compile the same sources, so one variant's objects must never be linked into another."""
    for variant in (v for v in variants.VARIANTS if "avx512f" not in v.needs):
        assert "%zmm" not in _machine_code("kernels", variant), f"the {variant.name} kernels hold AVX-512 code"
    assert "%zmm" not in _machine_code("sampler", variants.SAMPLER_VARIANT)
    assert "%zmm" in _machine_code("kernels", variants.by_name("avx512"))  # the check can see AVX-512 code
