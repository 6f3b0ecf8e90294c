"""The compiled per-row sampler (``cpu/kernels/sample_rows.cpp``) against the torch sampler and
the official golden probabilities, and where the engine uses it.

The sampler is the installed build (the ``sampler_kernel`` fixture); a machine without AVX2 skips
these (CI fails them) and samples with torch ops (the rest of ``test_sampler.py``).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
import torch

from tests.golden import FIXTURE_DIR, case, tensors
from turbotts import EngineConfig, SamplingParams, SynthesisParams
from turbotts.engine.core import EngineCore
from turbotts.engine.decode_path import FUSED_SAMPLER_ENV
from turbotts.engine.sampler import PENALTY_WINDOW, SamplingBatch, process_logits, sample, sample_on_kernel
from turbotts.sources import ModelSource, load_model

VOCAB = 626
EOS = 625


def _random_batch(num_rows: int, g: torch.Generator, *, top_p: float, top_k: int, penalty: float) -> SamplingBatch:
    return SamplingBatch(
        temperature=torch.rand(num_rows, 1, generator=g) * 0.9 + 0.1,
        repetition_penalty=torch.full((num_rows, 1), penalty),
        top_p=torch.full((num_rows, 1), top_p),
        top_k=torch.full((num_rows,), top_k, dtype=torch.long),
        history=torch.randint(0, VOCAB + 1, (num_rows, PENALTY_WINDOW), generator=g),  # VOCAB: padding
        ban_eos=torch.rand(num_rows, generator=g) < 0.5,
        is_greedy=torch.rand(num_rows, generator=g) < 0.25,
        seeds=torch.randint(0, 2**62, (num_rows,), generator=g),
        steps=torch.randint(0, 4000, (num_rows,), generator=g),
    )


@pytest.mark.parametrize("name", ["k1", "k2"])
def test_kernel_probabilities_match_the_official_pipeline(sampler_kernel: ModuleType, name: str) -> None:
    golden = tensors("k_sampling")
    params = case("k_sampling")["params"][name]
    logits = golden[f"{name}_logits"]
    num_rows = logits.shape[0]
    batch = SamplingBatch(
        temperature=golden[f"{name}_temperature"],
        repetition_penalty=torch.full((num_rows, 1), params["penalty"]),
        top_p=torch.full((num_rows, 1), params["top_p"]),
        top_k=torch.full((num_rows,), params["top_k"], dtype=torch.long),
        history=golden[f"{name}_history"][:, -PENALTY_WINDOW:].contiguous(),
        ban_eos=torch.zeros(num_rows, dtype=torch.bool),
        is_greedy=torch.zeros(num_rows, dtype=torch.bool),
        seeds=torch.arange(num_rows, dtype=torch.long) * 7919 + 11,
        steps=torch.zeros(num_rows, dtype=torch.long),
    )
    probs = torch.zeros(num_rows, VOCAB)
    ids = sample_on_kernel(sampler_kernel, logits, batch, EOS, probs)
    torch.testing.assert_close(probs, golden[f"{name}_probs"], rtol=0, atol=1e-6)
    assert bool((probs.gather(1, ids[:, None]) > 0).all()), "drew an id the filters dropped"


@pytest.mark.parametrize(
    ("top_p", "top_k", "penalty"), [(0.7, 20, 1.05), (1.0, 600, 1.0), (0.05, 1, 1.3), (0.95, 5, 1.0)]
)
def test_kernel_draws_what_the_torch_sampler_draws(
    sampler_kernel: ModuleType, top_p: float, top_k: int, penalty: float
) -> None:
    num_equal = num_rows = 0
    for trial in range(60):
        g = torch.Generator().manual_seed(trial)
        logits = torch.randn(4, VOCAB, generator=g) * 3
        batch = _random_batch(4, g, top_p=top_p, top_k=top_k, penalty=penalty)
        probs = torch.zeros(4, VOCAB)
        ids = sample_on_kernel(sampler_kernel, logits, batch, EOS, probs)
        want = sample(logits, batch, EOS)
        sampled = ~batch.is_greedy
        torch.testing.assert_close(
            probs[sampled], process_logits(logits, batch, EOS).softmax(-1)[sampled], rtol=0, atol=1e-6
        )
        assert torch.equal(ids[batch.is_greedy], want[batch.is_greedy])  # argmax: exact
        assert not bool((ids[batch.ban_eos] == EOS).any())
        num_equal += int((ids == want).sum())
        num_rows += len(ids)
    # the probabilities agree to float32 rounding, so only a uniform within it of a boundary may differ
    assert num_equal >= 0.99 * num_rows


def test_kernel_keeps_three_tokens_and_a_row_does_not_depend_on_the_others(sampler_kernel: ModuleType) -> None:
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(6, VOCAB, generator=g)
    batch = _random_batch(6, g, top_p=0.01, top_k=1, penalty=1.05)
    batch = SamplingBatch(**{**vars(batch), "is_greedy": torch.zeros(6, dtype=torch.bool)})
    probs = torch.zeros(6, VOCAB)
    together = sample_on_kernel(sampler_kernel, logits, batch, EOS, probs)
    kept = (probs > 0).sum(-1)
    want = torch.isfinite(process_logits(logits, batch, EOS)).sum(-1)
    assert torch.equal(kept, want) and bool((kept >= 2).all())  # 3 kept, EOS banned on some rows
    for row in range(6):
        single = SamplingBatch(**{f: getattr(batch, f)[row : row + 1] for f in batch.__dataclass_fields__})
        assert sample_on_kernel(sampler_kernel, logits[row : row + 1], single, EOS).item() == together[row].item()


def test_kernel_refuses_inputs_of_the_wrong_shape(sampler_kernel: ModuleType) -> None:
    g = torch.Generator().manual_seed(0)
    batch = _random_batch(4, g, top_p=0.7, top_k=20, penalty=1.0)
    with pytest.raises(RuntimeError, match="sample_rows: top_k/seeds/steps/history"):
        short = SamplingBatch(**{**vars(batch), "seeds": batch.seeds[:3]})
        sample_on_kernel(sampler_kernel, torch.randn(4, VOCAB), short, EOS)
    with pytest.raises(RuntimeError, match="eos id"):
        sample_on_kernel(sampler_kernel, torch.randn(4, VOCAB), batch, VOCAB)


def _speak(quant: str, monkeypatch: pytest.MonkeyPatch, fused: str) -> tuple[ModuleType | None, np.ndarray]:
    monkeypatch.setenv(FUSED_SAMPLER_ENV, fused)
    core = EngineCore(load_model(ModelSource(checkpoint=FIXTURE_DIR), quant=quant), EngineConfig())
    params = SynthesisParams(code=SamplingParams(max_new_tokens=24, ignore_eos=True), refine_text=False, seed=3)
    core.add_request("a", "the engine samples every frame", params)
    outputs = []
    while core.has_work():
        outputs += core.step()
    return core.runner.sampling_kernel, outputs[-1].audio


@pytest.mark.usefixtures("int8_kernel")  # the engine samples on the C++ sampler only where the int8 kernels load
def test_the_engine_samples_int8_steps_on_the_kernel_with_the_same_audio(
    sampler_kernel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_kernel, audio = _speak("int8", monkeypatch, "1")
    off_kernel, torch_audio = _speak("int8", monkeypatch, "0")
    float_kernel, _ = _speak("none", monkeypatch, "1")
    assert on_kernel is sampler_kernel and off_kernel is None and float_kernel is None
    assert len(audio) > 0 and np.array_equal(audio, torch_audio)  # the same codes drawn, frame by frame
