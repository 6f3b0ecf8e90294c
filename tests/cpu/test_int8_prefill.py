"""oneDNN's int8 matmul for prefill-sized calls: the int8 product fbgemm computes, adopted only by its probe.

Checked where fbgemm uses full 8-bit activations (VNNI), the only CPUs where the probe may adopt oneDNN;
elsewhere the choice itself is checked to refuse. The two agree to the last bit on AMX, within an ulp on
an AVX-512 VNNI core without it; the probe adopts oneDNN only where they are bit-equal.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from turbotts.cpu import int8_prefill
from turbotts.cpu.quant import REDUCE_RANGE, Int8Linear, quantize_per_channel

needs_full_range = pytest.mark.skipif(
    REDUCE_RANGE or not int8_prefill.has_onednn_int8(),
    reason="fbgemm uses 7-bit activations on this CPU (no VNNI), or torch lacks oneDNN int8: oneDNN is never adopted",
)


@pytest.fixture(autouse=True)
def fresh_choice() -> Iterator[None]:
    """Each test probes (or refuses) anew, under its own environment."""
    int8_prefill.choice.cache_clear()
    yield
    int8_prefill.choice.cache_clear()


def _weights(seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(96, 64, generator=gen) * 0.1, torch.randn(32, 64, generator=gen) * 0.1]


#: one float32 ulp at the outputs' magnitude: the most the two libraries' dequantization orders differ by
ULP_RTOL = 2**-23


@needs_full_range
def test_onednn_matmul_is_fbgemms_int8_product() -> None:
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(192, 128, generator=gen) * 0.05
    x = torch.randn(70, 128, generator=gen) * 3
    q, scale = quantize_per_channel(weight)
    fbgemm = Int8Linear([weight])
    assert fbgemm.packed is not None
    want = torch.ops.quantized.linear_dynamic(x, fbgemm.packed, False)
    got = int8_prefill.matmul(x, int8_prefill.prepack(q, scale))
    torch.testing.assert_close(got, want, rtol=2 * ULP_RTOL, atol=float(want.abs().max()) * 2 * ULP_RTOL)
    reference = x @ (q.float() * scale[:, None]).T  # and both are the int8 product, not something else
    assert float((got - reference).abs().max() / reference.abs().max()) < 0.02


@needs_full_range
def test_an_adopting_linear_sends_prompt_sized_calls_to_onednn_with_the_same_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(int8_prefill, "MIN_SPEEDUP", 0.0)  # adopt whatever the probe measures...
    is_bit_equal = int8_prefill._probe().is_bit_equal
    monkeypatch.setattr(int8_prefill, "_probe", lambda: int8_prefill.ProbeResult(1.0, 1.0, True))  # ...and finds
    adopted = Int8Linear(_weights())
    assert int8_prefill.choice(False).is_onednn and adopted.onednn is not None
    monkeypatch.setenv(int8_prefill.DISABLE_ENV, "0")
    int8_prefill.choice.cache_clear()
    plain = Int8Linear(_weights())
    assert plain.onednn is None
    x = torch.randn(2, int8_prefill.MIN_ROWS, 64, generator=torch.Generator().manual_seed(2))
    if is_bit_equal:  # a CPU where the probe adopts it for real (AMX): the same bits
        torch.testing.assert_close(adopted(x), plain(x), rtol=0, atol=0)
    else:
        torch.testing.assert_close(adopted(x), plain(x), rtol=2 * ULP_RTOL, atol=2 * ULP_RTOL * 8)
    calls: list[int] = []
    matmul = int8_prefill.matmul
    monkeypatch.setattr(int8_prefill, "matmul", lambda x, weight: calls.append(x.shape[0]) or matmul(x, weight))
    adopted(x)  # 64 rows: oneDNN
    adopted(x[:, :4])  # a decode-sized call: not
    assert calls == [2 * int8_prefill.MIN_ROWS]


def test_switched_off_by_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(int8_prefill.DISABLE_ENV, "0")
    chosen = int8_prefill.choice(False)
    assert not chosen.is_onednn and chosen.name == "fbgemm"
    assert int8_prefill.DISABLE_ENV in chosen.reason
    assert Int8Linear(_weights()).onednn is None


def test_never_adopted_where_fbgemm_uses_seven_bit_activations() -> None:
    chosen = int8_prefill.choice(True)
    assert not chosen.is_onednn
    assert "7-bit" in chosen.reason


@needs_full_range
def test_the_probe_reports_both_timings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(int8_prefill, "MIN_SPEEDUP", float("inf"))  # never fast enough
    chosen = int8_prefill.choice(False)
    assert not chosen.is_onednn
    assert "oneDNN" in chosen.reason and "fbgemm" in chosen.reason and "ms" in chosen.reason


@needs_full_range
def test_the_probe_adopts_onednn_only_where_its_results_are_bit_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(int8_prefill, "MIN_SPEEDUP", 0.0)
    for is_bit_equal in (True, False):
        monkeypatch.setattr(
            int8_prefill, "_probe", lambda equal=is_bit_equal: int8_prefill.ProbeResult(1.0, 2.0, equal)
        )
        int8_prefill.choice.cache_clear()
        chosen = int8_prefill.choice(False)
        assert chosen.is_onednn is is_bit_equal
        assert ("differ from fbgemm's" in chosen.reason) is not is_bit_equal
