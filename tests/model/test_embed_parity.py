"""Embed against the official package: prompt embeddings (case d) and the folded heads."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.golden import FIXTURE_DIR, fixture_config, tensors
from turbotts.config import GPTConfig, model_config_from_dict
from turbotts.errors import CheckpointError
from turbotts.model.embed import Embed, fold_weight_norm

ASSET = FIXTURE_DIR / "asset"


def tiny_config() -> GPTConfig:
    gpt_json = json.loads((ASSET / "gpt" / "config.json").read_text())
    return model_config_from_dict(fixture_config(), gpt_json).gpt


@pytest.fixture(scope="module")
def embed() -> Embed:
    module = Embed(tiny_config())
    module.load_state_dict(fold_weight_norm(load_file(str(ASSET / "Embed.safetensors"))), strict=True)
    return module.eval()


@pytest.mark.parametrize(
    ("golden_name", "prompt_case"),
    [("emb_b1", "b1_code_prompts"), ("emb_b3", "b3_refine_prompts"), ("emb_b4", "b4_code_prompts_audio_prompt")],
)
def test_prompt_embedding_matches_official(embed: Embed, golden_name: str, prompt_case: str) -> None:
    prompt = tensors(prompt_case)
    with torch.inference_mode():
        emb = embed.embed(prompt["input_ids"], prompt["text_mask"])
    torch.testing.assert_close(emb, tensors("d_embed")[golden_name], rtol=0, atol=1e-6)


def test_text_ids_beyond_code_tables_only_reach_emb_text(embed: Embed) -> None:
    ids = torch.tensor([[[700, 0, 0, 0], [3, 4, 5, 6]]])  # 700 > 625: only valid in emb_text
    text_mask = torch.tensor([[True, False]])
    with torch.inference_mode():
        emb = embed.embed(ids, text_mask)
        torch.testing.assert_close(emb[0, 0], embed.embed_text_ids(torch.tensor([700]))[0])
        torch.testing.assert_close(emb[0, 1], embed.embed_codes(ids[0, 1:])[0])


def test_embed_codes_is_the_sum_of_the_tables(embed: Embed) -> None:
    codes = torch.tensor([[1, 2, 3, 625], [0, 0, 0, 0]])
    expected = sum(embed.emb_code[q].weight[codes[:, q]] for q in range(4))
    with torch.inference_mode():
        torch.testing.assert_close(embed.embed_codes(codes), expected)


def test_folded_heads_equal_torch_weight_norm() -> None:
    raw = load_file(str(ASSET / "Embed.safetensors"))
    folded = fold_weight_norm(raw)
    assert "head_text.weight" in folded
    assert not any("parametrizations" in key for key in folded)
    reference = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(64, 626, bias=False), dim=0)
    reference.parametrizations.weight.original0.data.copy_(raw["head_code.2.parametrizations.weight.original0"])
    reference.parametrizations.weight.original1.data.copy_(raw["head_code.2.parametrizations.weight.original1"])
    assert torch.equal(folded["head_code.2.weight"], reference.weight.detach())
    row_norms = folded["head_text.weight"].norm(dim=1)
    torch.testing.assert_close(row_norms, raw["head_text.parametrizations.weight.original0"].abs().squeeze(1))


def test_fold_rejects_a_half_pair() -> None:
    raw = load_file(str(ASSET / "Embed.safetensors"))
    del raw["head_text.parametrizations.weight.original1"]
    with pytest.raises(CheckpointError, match="head_text"):
        fold_weight_norm(raw)


def test_logits_shapes(embed: Embed) -> None:
    hidden = torch.randn(3, 64)
    with torch.inference_mode():
        assert embed.code_logits(hidden).shape == (3, 4, 626)
        assert embed.text_logits(hidden).shape == (3, 768)
