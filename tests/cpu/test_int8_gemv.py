"""The int8 decode kernel: its numbers against a float matmul and fbgemm, both ISA builds, and its routing.

The kernels are the installed builds (``setup.py``): the variant this CPU runs (``int8_kernel``)
and the AVX2 one (``avx2_kernel``); a machine without AVX2 skips them (CI fails them) and is
covered by the fallback test. Loading and the run-time build: ``test_extensions.py``.
"""

from __future__ import annotations

import logging
from types import ModuleType

import pytest
import torch

from turbotts.cpu import int8_gemv
from turbotts.cpu.extensions import clear_caches
from turbotts.cpu.info import cpu_info
from turbotts.cpu.quant import REDUCE_RANGE, Int8Linear, dequantize, quantize_per_channel

# (N, K): one tile; many tiles split over threads; K over one int32 block (4096 inputs)
SHAPES = [(4, 32), (2304, 768), (768, 3072), (8, 4096 + 64)]


def _reference(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x.double() @ dequantize(q, scale).double().t()


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).abs().max() / want.abs().max())


def _check_kernel(kernel: ModuleType) -> None:
    generator = torch.Generator().manual_seed(0)
    for n, k in SHAPES:
        q, scale = quantize_per_channel(torch.randn(n, k, generator=generator))
        tiles = kernel.pack(q)
        for rows in (1, 2, 3, 4):
            x = torch.randn(rows, k, generator=generator) * 3
            got = kernel.gemv(x, tiles, scale)
            assert got.shape == (rows, n)
            # int16 activations: about 2^-15 of the largest input per product
            assert _relative_error(got, _reference(x, q, scale)) < 2e-4, (n, k, rows)


def test_native_build_matches_a_float_matmul(int8_kernel: ModuleType) -> None:
    # "+vnni" / "+avxvnni" where the CPU fuses the multiply and the add
    assert int8_kernel.isa().split("+")[0] == ("avx512bw" if "avx512bw" in cpu_info().flags else "avx2")
    _check_kernel(int8_kernel)


def test_avx2_build_matches_a_float_matmul(avx2_kernel: ModuleType) -> None:
    assert avx2_kernel.isa() == "avx2"
    _check_kernel(avx2_kernel)


def test_kernel_is_more_accurate_than_fbgemm(int8_kernel: ModuleType) -> None:
    """fbgemm quantizes the activations to 8 bits per tensor, the kernel to 16 bits per row."""
    generator = torch.Generator().manual_seed(1)
    q, scale = quantize_per_channel(torch.randn(768, 768, generator=generator))
    linear = Int8Linear([dequantize(q, scale)])
    assert linear.packed is not None
    x = torch.randn(1, 768, generator=generator)
    want = _reference(x, q, scale)
    kernel_error = _relative_error(int8_kernel.gemv(x, int8_kernel.pack(q), scale), want)
    fbgemm_error = _relative_error(torch.ops.quantized.linear_dynamic(x, linear.packed, REDUCE_RANGE), want)
    assert kernel_error * 20 < fbgemm_error, (kernel_error, fbgemm_error)


def test_small_batches_take_the_kernel_and_larger_ones_fbgemm(int8_kernel: ModuleType) -> None:
    generator = torch.Generator().manual_seed(2)
    weights = [torch.randn(64, 128, generator=generator), torch.randn(192, 128, generator=generator)]
    linear = Int8Linear(weights)
    assert linear.tiles is not None and linear.packed is not None
    small = torch.randn(2, 1, 128, generator=generator)  # (B, L, K): rows = B * L
    out = linear(small)
    assert out.shape == (2, 1, 256)
    assert torch.equal(out.view(2, 256), int8_kernel.gemv(small.view(2, 128), linear.tiles, linear.scale))
    large = torch.randn(int8_gemv.MAX_ROWS + 5, 128, generator=generator)
    assert torch.equal(linear(large), torch.ops.quantized.linear_dynamic(large, linear.packed, REDUCE_RANGE))


def test_bad_arguments_raise_clear_errors(int8_kernel: ModuleType) -> None:
    q, scale = quantize_per_channel(torch.randn(8, 64))
    tiles = int8_kernel.pack(q)
    with pytest.raises(RuntimeError, match="1 to 4 rows"):
        int8_kernel.gemv(torch.randn(5, 64), tiles, scale)
    with pytest.raises(RuntimeError, match="must be"):
        int8_kernel.gemv(torch.randn(1, 32), tiles, scale)
    with pytest.raises(RuntimeError, match="multiple of 4"):
        int8_kernel.pack(torch.zeros(6, 64, dtype=torch.int8))


def test_shapes_the_kernel_cannot_tile_stay_on_fbgemm() -> None:
    linear = Int8Linear([torch.randn(6, 40)])  # N not a multiple of 4, K not of 32
    assert linear.tiles is None and linear.packed is not None
    x = torch.randn(1, 40)
    assert torch.equal(linear(x), torch.ops.quantized.linear_dynamic(x, linear.packed, REDUCE_RANGE))


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(int8_gemv.DISABLE_ENV, "0")
    clear_caches()
    try:
        with caplog.at_level(logging.INFO, logger="turbotts.cpu.extensions"):
            assert int8_gemv.load_kernel() is None
            linear = Int8Linear([torch.randn(64, 128)])
        assert linear.tiles is None and linear.kernel is None
        assert "TURBOTTS_INT8_GEMV=0" in caplog.text
    finally:
        monkeypatch.delenv(int8_gemv.DISABLE_ENV)
        clear_caches()
