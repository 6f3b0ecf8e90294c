"""The vectorized sampler against the official per-step logits pipeline (case k_sampling)."""

from __future__ import annotations

import pytest
import torch

from tests.golden import case, tensors
from turbotts.engine.sampler import (
    PENALTY_WINDOW,
    SamplingBatch,
    apply_repetition_penalty,
    apply_top_k,
    apply_top_p,
    counter_uniform,
    draw,
    process_logits,
    sample,
)

VOCAB = 626
EOS = 625


def _batch(
    num_rows: int,
    *,
    temperature: torch.Tensor,
    penalty: float,
    top_p: float,
    top_k: int,
    history: torch.Tensor,
    greedy: bool = False,
    ban_eos: bool = False,
) -> SamplingBatch:
    return SamplingBatch(
        temperature=temperature,
        repetition_penalty=torch.full((num_rows, 1), penalty),
        top_p=torch.full((num_rows, 1), top_p),
        top_k=torch.full((num_rows,), top_k, dtype=torch.long),
        history=history,
        ban_eos=torch.full((num_rows,), ban_eos),
        is_greedy=torch.full((num_rows,), greedy),
        seeds=torch.arange(num_rows, dtype=torch.long) * 7919 + 11,
        steps=torch.zeros(num_rows, dtype=torch.long),
    )


@pytest.mark.parametrize("name", ["k1", "k2"])
def test_each_stage_matches_official(name: str) -> None:
    golden = tensors("k_sampling")
    params = case("k_sampling")["params"][name]
    history = golden[f"{name}_history"][:, -PENALTY_WINDOW:]
    logits = golden[f"{name}_logits"] / golden[f"{name}_temperature"]
    torch.testing.assert_close(logits, golden[f"{name}_after_temperature"], rtol=0, atol=1e-5)
    penalty = torch.full((logits.shape[0], 1), params["penalty"])
    logits = apply_repetition_penalty(logits, history, penalty)
    torch.testing.assert_close(logits, golden[f"{name}_after_penalty"], rtol=0, atol=1e-5)
    logits = apply_top_p(logits, torch.full((logits.shape[0], 1), params["top_p"]))
    torch.testing.assert_close(logits, golden[f"{name}_after_top_p"], rtol=0, atol=1e-5)
    logits = apply_top_k(logits, torch.full((logits.shape[0],), params["top_k"], dtype=torch.long))
    torch.testing.assert_close(logits, golden[f"{name}_after_top_k"], rtol=0, atol=1e-5)
    torch.testing.assert_close(logits.softmax(-1), golden[f"{name}_probs"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["k1", "k2"])
def test_process_logits_end_to_end(name: str) -> None:
    golden = tensors("k_sampling")
    params = case("k_sampling")["params"][name]
    num_rows = golden[f"{name}_logits"].shape[0]
    batch = _batch(
        num_rows,
        temperature=golden[f"{name}_temperature"],
        penalty=params["penalty"],
        top_p=params["top_p"],
        top_k=params["top_k"],
        history=golden[f"{name}_history"][:, -PENALTY_WINDOW:],
    )
    probs = process_logits(golden[f"{name}_logits"], batch, EOS).softmax(-1)
    torch.testing.assert_close(probs, golden[f"{name}_probs"], rtol=0, atol=1e-6)


def test_k2_keeps_three_tokens_even_with_top_k_1() -> None:
    golden = tensors("k_sampling")
    kept = torch.isfinite(golden["k2_after_top_k"]).sum(-1)
    assert bool((kept >= 3).all())
    batch = _batch(
        8,
        temperature=golden["k2_temperature"],
        penalty=1.05,
        top_p=0.05,
        top_k=1,
        history=golden["k2_history"][:, -PENALTY_WINDOW:],
    )
    ours = torch.isfinite(process_logits(golden["k2_logits"], batch, EOS)).sum(-1)
    assert torch.equal(ours, kept)


def test_padding_entries_in_history_are_ignored() -> None:
    logits = torch.randn(2, VOCAB)
    history = torch.tensor([[3, 3, VOCAB, VOCAB], [VOCAB, VOCAB, VOCAB, VOCAB]])
    out = apply_repetition_penalty(logits, history, torch.full((2, 1), 2.0))
    expected_row0 = logits[0].clone()
    expected_row0[3] = expected_row0[3] * 4 if expected_row0[3] < 0 else expected_row0[3] / 4
    torch.testing.assert_close(out[0], expected_row0)
    torch.testing.assert_close(out[1], logits[1])


def test_draw_follows_the_distribution_and_never_picks_zero_probability() -> None:
    probs = torch.zeros(1, 10)
    probs[0, 2], probs[0, 7] = 0.25, 0.75
    uniforms = counter_uniform(torch.full((20000,), 5, dtype=torch.long), torch.arange(20000))
    ids = draw(probs.expand(20000, 10), uniforms)
    assert set(ids.tolist()) == {2, 7}
    share_of_7 = (ids == 7).double().mean().item()
    assert abs(share_of_7 - 0.75) < 0.02
    assert draw(probs, torch.zeros(1, dtype=torch.float64)).item() == 2


def test_counter_uniform_is_deterministic_and_spread() -> None:
    seeds = torch.tensor([1, 1, 2, 2**62 + 5])
    steps = torch.tensor([0, 1, 0, 0])
    first = counter_uniform(seeds, steps)
    assert torch.equal(first, counter_uniform(seeds, steps))
    assert len(set(first.tolist())) == 4
    many = counter_uniform(torch.full((100000,), 42, dtype=torch.long), torch.arange(100000))
    assert many.min().item() >= 0.0 and many.max().item() < 1.0
    assert abs(many.mean().item() - 0.5) < 0.01


def test_greedy_rows_take_argmax_and_respect_eos_ban() -> None:
    logits = torch.randn(4, VOCAB)
    logits[:, EOS] = 100.0
    history = torch.full((4, 1), VOCAB)
    batch = _batch(
        4, temperature=torch.ones(4, 1), penalty=1.0, top_p=0.7, top_k=20, history=history, greedy=True, ban_eos=True
    )
    ids = sample(logits, batch, EOS)
    expected = logits.clone()
    expected[:, EOS] = float("-inf")
    assert torch.equal(ids, expected.argmax(-1))


def test_a_row_draw_does_not_depend_on_other_rows() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, VOCAB)
    history = torch.full((6, 2), VOCAB)
    batch = _batch(6, temperature=torch.full((6, 1), 0.7), penalty=1.05, top_p=0.9, top_k=50, history=history)
    together = sample(logits, batch, EOS)
    for row in range(6):
        single = SamplingBatch(**{f: getattr(batch, f)[row : row + 1] for f in batch.__dataclass_fields__})
        assert sample(logits[row : row + 1], single, EOS).item() == together[row].item()
