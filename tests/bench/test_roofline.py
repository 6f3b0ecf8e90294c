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
from turbotts.cpu import int8_gemv
from turbotts.cpu.extensions import clear_caches


def test_the_read_loop_reads_every_word(read_probe: ModuleType) -> None:
    words = torch.randint(-(2**62), 2**62, (3 * 4096 + 5,), dtype=torch.int64)  # several threads' ranges, a tail
    want = int(np.bitwise_xor.reduce(words.numpy()))
    assert read_probe.xor_words(words) == want
    words[-1] ^= 1 << 40  # one bit of the last word moves the result: nothing is skipped
    assert read_probe.xor_words(words) == want ^ (1 << 40)
    with pytest.raises(RuntimeError, match="whole 64-bit words"):
        read_probe.xor_words(torch.zeros(7, dtype=torch.uint8))


@pytest.mark.usefixtures("int8_kernel", "read_probe")
def test_both_yardsticks_measure_a_positive_speed() -> None:
    read = measure_read_bytes_per_s(8 * 2**20, repeats=2)
    probe = measure_bandwidth_bytes_per_s(64 * 2**20, repeats=2)
    cached = measure_int8_kernel_cached_bytes_per_s(budget_s=0.05)
    assert read is not None and read > 0 and probe > 0
    assert cached is not None and cached > 0


@pytest.mark.usefixtures("read_probe")
def test_without_the_int8_kernels_their_yardstick_is_none_and_the_read_loop_still_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The read loop is an extension of its own: switching the serving kernels off leaves it."""
    monkeypatch.setenv(int8_gemv.DISABLE_ENV, "0")
    clear_caches()
    try:
        assert measure_int8_kernel_cached_bytes_per_s() is None
        read = measure_read_bytes_per_s(2**20, repeats=1)
        assert read is not None and read > 0
    finally:
        monkeypatch.delenv(int8_gemv.DISABLE_ENV)
        clear_caches()
