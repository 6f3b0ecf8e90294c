"""GPT + heads against the official package on teacher-forced inputs (cases e1, e2)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.golden import FIXTURE_DIR, fixture_config, tensors
from turbotts.config import GPTConfig, model_config_from_dict
from turbotts.model.embed import Embed, fold_weight_norm
from turbotts.model.gpt import GPT

ASSET = FIXTURE_DIR / "asset"
ATOL = 1e-5


def tiny_config() -> GPTConfig:
    gpt_json = json.loads((ASSET / "gpt" / "config.json").read_text())
    return model_config_from_dict(fixture_config(), gpt_json).gpt


@pytest.fixture(scope="module", params=[False, True], ids=["unfused", "fused"])
def is_fused(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture(scope="module")
def embed(is_fused: bool) -> Embed:
    module = Embed(tiny_config())
    module.load_state_dict(fold_weight_norm(load_file(str(ASSET / "Embed.safetensors"))), strict=True)
    module.eval()
    return module.fuse() if is_fused else module


@pytest.fixture(scope="module")
def gpt(is_fused: bool) -> GPT:
    model = GPT(tiny_config())
    model.load_state_dict(load_file(str(ASSET / "gpt" / "model.safetensors")), strict=True)
    model.eval()
    return model.fuse() if is_fused else model


def test_parameter_names_are_the_checkpoint_keys() -> None:
    checkpoint = load_file(str(ASSET / "gpt" / "model.safetensors"))
    model = GPT(tiny_config())
    assert set(model.state_dict()) == set(checkpoint)
    assert model.kv_bytes_per_token() == 2 * 2 * 4 * 16 * 4


def test_e1_teacher_forced(gpt: GPT, embed: Embed) -> None:
    case = tensors("e1_gpt_teacher_forced")
    with torch.inference_mode():
        emb = embed.embed(case["input_ids"], case["text_mask"])
        hidden = gpt(emb, case["position_ids"])
        logits_code = embed.code_logits(hidden)  # (1, L, 4, 626)
        logits_text = embed.text_logits(hidden)
    torch.testing.assert_close(emb, case["emb"], rtol=0, atol=1e-6)
    torch.testing.assert_close(hidden, case["hidden"], rtol=0, atol=ATOL)
    torch.testing.assert_close(logits_code, case["logits_code"], rtol=0, atol=ATOL)
    torch.testing.assert_close(logits_text, case["logits_text"], rtol=0, atol=ATOL)


def test_e2_left_padded_batch(gpt: GPT, embed: Embed) -> None:
    case, prompts = tensors("e2_gpt_teacher_forced_padded"), tensors("b1_code_prompts")
    valid = case["valid"]
    assert not valid.all(), "the case must contain padding to test anything"
    with torch.inference_mode():
        emb = embed.embed(prompts["input_ids"], prompts["text_mask"])
        hidden = gpt(emb, case["position_ids"], prompts["attention_mask"])
        logits_code = embed.code_logits(hidden)
        logits_text = embed.text_logits(hidden)
    assert torch.isfinite(hidden).all()
    torch.testing.assert_close(hidden[valid], case["hidden"][valid], rtol=0, atol=ATOL)
    torch.testing.assert_close(logits_code[valid], case["logits_code"][valid], rtol=0, atol=ATOL)
    torch.testing.assert_close(logits_text[valid], case["logits_text"][valid], rtol=0, atol=ATOL)


def test_padding_does_not_change_a_row(gpt: GPT, embed: Embed) -> None:
    """The shortest b1 prompt alone equals its left-padded row in the batch."""
    prompts = tensors("b1_code_prompts")
    mask = prompts["attention_mask"]
    row = int(mask.sum(1).argmin())
    num_pad = int((mask[row] == 0).sum())
    assert num_pad > 0
    with torch.inference_mode():
        emb = embed.embed(prompts["input_ids"], prompts["text_mask"])
        positions = (mask.cumsum(1) - 1).masked_fill(mask == 0, 1)
        batched = gpt(emb, positions, mask)[row, num_pad:]
        alone = gpt(emb[row : row + 1, num_pad:], torch.arange(16 - num_pad)[None])[0]
    torch.testing.assert_close(batched, alone, rtol=0, atol=ATOL)


def test_fusion_is_dropped_when_weights_change() -> None:
    model = GPT(tiny_config()).fuse()
    assert model.is_fused
    model.load_state_dict(load_file(str(ASSET / "gpt" / "model.safetensors")), strict=True)
    assert not model.is_fused
    model.fuse().to(torch.float64)
    assert not model.is_fused
    embed = Embed(tiny_config()).fuse()
    assert embed.is_fused
    embed.load_state_dict(fold_weight_norm(load_file(str(ASSET / "Embed.safetensors"))), strict=True)
    assert not embed.is_fused
