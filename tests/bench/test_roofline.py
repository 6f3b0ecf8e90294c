"""The bench's yardsticks: the plain read loop reads every byte, and its speed and the int8 kernel's on
cached weights are reported."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
import torch

from turbotts.bench.roofline import (
    measure_bandwidth_bytes_per_s,
    measure_int8_kernel_cached_bytes_per_s,
    measure_read_bytes_per_s,
)
from turbotts.model import int8_gemv


def test_the_read_loop_reads_every_word(int8_kernel: ModuleType) -> None:
    words = torch.randint(-(2**62), 2**62, (3 * 4096 + 5,), dtype=torch.int64)  # several threads' ranges, a tail
    want = int(np.bitwise_xor.reduce(words.numpy()))
    assert int8_kernel.xor_words(words) == want
    words[-1] ^= 1 << 40  # one bit of the last word moves the result: nothing is skipped
    assert int8_kernel.xor_words(words) == want ^ (1 << 40)
    with pytest.raises(RuntimeError, match="whole 64-bit words"):
        int8_kernel.xor_words(torch.zeros(7, dtype=torch.uint8))


@pytest.mark.usefixtures("int8_kernel")
def test_both_yardsticks_measure_a_positive_speed() -> None:
    read = measure_read_bytes_per_s(8 * 2**20, repeats=2)
    probe = measure_bandwidth_bytes_per_s(64 * 2**20, repeats=2)
    cached = measure_int8_kernel_cached_bytes_per_s(budget_s=0.05)
    assert read is not None and read > 0 and probe > 0
    assert cached is not None and cached > 0


def test_without_the_kernels_the_read_loop_reports_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(int8_gemv.DISABLE_ENV, "0")
    int8_gemv.load_kernel.cache_clear()
    try:
        assert measure_read_bytes_per_s(2**20) is None
        assert measure_int8_kernel_cached_bytes_per_s() is None
    finally:
        monkeypatch.delenv(int8_gemv.DISABLE_ENV)
        int8_gemv.load_kernel.cache_clear()
