"""``auto`` precision never picks an emulated mode, passes explicit modes through, and names its reasons."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from turbotts.cpu import int8_gemv
from turbotts.cpu.extensions import clear_caches
from turbotts.cpu.info import CpuInfo, parse_cpuinfo
from turbotts.cpu.precision import resolve_precision
from turbotts.errors import CheckpointError

AVX2_ONLY = CpuInfo("AMD EPYC", frozenset({"sse4_2", "avx", "avx2", "fma"}))
CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse4_2 avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu
"""


def test_cpuinfo_names_the_isa_and_the_flags_that_matter() -> None:
    info = parse_cpuinfo(CPUINFO)
    assert info.model_name == "Intel(R) Xeon(R) Processor"
    assert info.isa == "amx" and info.has_native_bf16 and info.has_int8_dot
    assert info.report()["flags"] == ["amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f", "avx2"]
    assert AVX2_ONLY.isa == "avx2" and not AVX2_ONLY.has_native_bf16 and not AVX2_ONLY.has_int8_dot


@pytest.fixture
def int8_kernel_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The real switch that keeps the int8 decode kernel from loading (as on a machine without a compiler)."""
    monkeypatch.setenv(int8_gemv.DISABLE_ENV, "0")
    clear_caches()
    yield
    monkeypatch.delenv(int8_gemv.DISABLE_ENV)
    clear_caches()


def test_auto_never_picks_emulated_bf16_or_fbgemm_int8_without_vnni(int8_kernel_off: None) -> None:
    precision = resolve_precision("auto", "auto", "auto", "cpu", cpu=AVX2_ONLY)
    assert (precision.dtype, precision.quant, precision.vocoder_dtype) == ("fp32", "none", "fp32")
    assert precision.isa == "avx2"
    assert any("no native bf16" in r for r in precision.reasons)
    assert any("no int8 decode kernel here and no 8-bit dot product" in r for r in precision.reasons)


@pytest.mark.usefixtures("int8_kernel")  # CI machines have AVX2 and a C++ compiler
def test_on_avx2_auto_int8_follows_the_decode_kernels_probe() -> None:
    """The weight-streaming kernel needs AVX2 only (int16 multiply-adds), so VNNI is no longer required:
    on an AVX2-only EPYC it made a lone request 4.5x faster than fp32."""
    precision = resolve_precision("auto", "auto", "auto", "cpu", cpu=AVX2_ONLY)
    (why,) = [r for r in precision.reasons if r.startswith("quant")]
    if precision.quant == "int8":
        assert why == "quant int8: the int8 decode kernel is faster in the probe"
        assert any(r.startswith("dtype fp32: int8 matmuls take fp32") for r in precision.reasons)
    else:
        assert why == "quant none: the int8 decode kernel not faster in the probe"
    baseline = CpuInfo("old x86", frozenset({"sse4_2"}))  # no AVX2: neither the kernel nor VNNI
    assert resolve_precision("auto", "auto", "auto", "cpu", cpu=baseline).quant == "none"


def test_explicit_modes_pass_through_and_serving_keeps_int8_opt_in() -> None:
    assert resolve_precision("bf16", "int8", "bf16", "cpu", cpu=AVX2_ONLY).report()["reasons"] == []
    default = resolve_precision(cpu=AVX2_ONLY)  # the serving defaults: dtype and vocoder auto, quant none
    assert default.quant == "none"


def test_on_a_native_bf16_cpu_auto_follows_the_probe() -> None:
    native = parse_cpuinfo(CPUINFO)
    precision = resolve_precision("auto", "auto", "auto", "cpu", cpu=native)
    assert precision.dtype in ("fp32", "bf16") and precision.quant in ("none", "int8")
    assert len(precision.reasons) == 3
    measured = (
        [r for r in precision.reasons if not r.startswith("dtype")] if precision.quant == "int8" else precision.reasons
    )
    assert all("probe" in r for r in measured)  # measured, not assumed


def test_int8_weights_keep_fp32_activations_even_where_bf16_is_native() -> None:
    """fbgemm's int8 matmul reads and writes fp32: bf16 activations would only add casts around it."""
    native = parse_cpuinfo(CPUINFO)
    precision = resolve_precision("auto", "int8", "auto", "cpu", cpu=native)
    assert (precision.dtype, precision.quant) == ("fp32", "int8")
    assert any(r.startswith("dtype fp32: int8 matmuls take fp32") for r in precision.reasons)
    assert resolve_precision("bf16", "int8", "auto", "cpu", cpu=native).dtype == "bf16"  # asked for, kept


def test_unknown_modes_are_refused() -> None:
    with pytest.raises(CheckpointError, match="--dtype must be one of auto, fp32, bf16, fp16"):
        resolve_precision("int4")
    with pytest.raises(CheckpointError, match="--quant must be one of auto, none, int8"):
        resolve_precision(quant="int4")
