"""int8 (and bf16) GPT weights on the tiny fixture model: storage, accuracy and the engine end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.golden import FIXTURE_DIR, tensors
from turbotts.api import TTS
from turbotts.bench.roofline import decode_weight_bytes
from turbotts.cpu.quant import Int8Linear, Int8Placeholder, dequantize, quantize_per_channel, stored_weight_bytes
from turbotts.errors import CheckpointError
from turbotts.fidelity.agreement import code_agreement, mean_kl
from turbotts.model.chattts import ChatTTSModel
from turbotts.params import SamplingParams, SynthesisParams
from turbotts.sources import ModelSource, load_model


@pytest.fixture(scope="module")
def fp32() -> ChatTTSModel:
    return load_model(ModelSource(checkpoint=FIXTURE_DIR))


@pytest.fixture(scope="module")
def int8() -> ChatTTSModel:
    return load_model(ModelSource(checkpoint=FIXTURE_DIR), quant="int8")


def test_per_channel_quantization_round_trips() -> None:
    weight = torch.randn(32, 16) * torch.logspace(-3, 0, 32)[:, None]  # rows of very different scale
    q, scale = quantize_per_channel(weight)
    assert q.dtype == torch.int8 and scale.shape == (32,)
    error = (dequantize(q, scale) - weight).abs().amax(dim=1)
    assert torch.all(error <= scale / 2 + 1e-7)  # half a step per row


def test_linears_are_int8(int8: ChatTTSModel, fp32: ChatTTSModel) -> None:
    gpt = int8.modules.gpt
    for layer in gpt.layers:
        assert isinstance(layer.self_attn.q_proj, Int8Placeholder)
        assert isinstance(layer.mlp.down_proj, Int8Placeholder)
        for fused in (layer.self_attn._qkv, layer.self_attn._o, layer.mlp._gate_up, layer.mlp._down):
            assert isinstance(fused, Int8Linear)
            assert fused.packed is not None  # the dynamic int8 kernel on CPU
    assert not any(isinstance(m, torch.nn.Linear) for m in gpt.modules())
    assert isinstance(int8.modules.embed._code_heads, Int8Linear)
    linear_fp32 = sum(m.weight.numel() * 4 for m in fp32.modules.gpt.modules() if isinstance(m, torch.nn.Linear))
    linear_int8 = sum(m.num_bytes for m in gpt.modules() if isinstance(m, Int8Placeholder))
    assert linear_int8 <= 0.3 * linear_fp32
    assert decode_weight_bytes(int8) <= 0.3 * decode_weight_bytes(fp32)
    assert stored_weight_bytes(fp32.modules.gpt) == sum(p.numel() * 4 for p in fp32.modules.gpt.parameters())


def _teacher_forced_logits(model: ChatTTSModel) -> torch.Tensor:
    case = tensors("e1_gpt_teacher_forced")
    embed = model.modules.embed
    with torch.inference_mode():
        hidden = model.modules.gpt(embed.embed(case["input_ids"], case["text_mask"]), case["position_ids"])
        return embed.code_logits(hidden).float()  # (1, L, 4, 626)


@pytest.mark.parametrize(
    "dtype,quant,min_agreement,max_kl", [("fp32", "int8", 0.85, 0.01), ("bf16", "none", 0.9, 0.01)]
)
def test_logits_close_to_fp32(fp32: ChatTTSModel, dtype: str, quant: str, min_agreement: float, max_kl: float) -> None:
    model = load_model(ModelSource(checkpoint=FIXTURE_DIR), dtype=dtype, quant=quant)
    reference, test = _teacher_forced_logits(fp32), _teacher_forced_logits(model)
    assert code_agreement(reference, test) >= min_agreement
    assert 0 < mean_kl(reference, test) <= max_kl


@pytest.mark.parametrize("dtype,quant", [("fp32", "int8"), ("bf16", "none"), ("bf16", "int8")])
def test_engine_end_to_end(dtype: str, quant: str) -> None:
    model = load_model(ModelSource(checkpoint=FIXTURE_DIR), dtype=dtype, quant=quant)
    params = SynthesisParams(code=SamplingParams(max_new_tokens=12, ignore_eos=True), refine_text=False, seed=3)
    tts = TTS(model)
    result = tts.generate_codes(["hello world"], params)[0]
    assert result.codes.shape == (12, 4)
    # the KV cache follows the GPT, but is bf16 under the fused int8 stack (kv_dtype auto)
    expected_kv = torch.bfloat16 if model.modules.gpt.fused_decode is not None else model.dtype
    assert tts.engine.runner.cache.data.dtype == expected_kv
    wav = tts.synthesize(["hello world"], params)[0]
    assert wav.dtype == np.float32 and len(wav) > 0 and np.isfinite(wav).all()


def test_moving_a_quantized_gpt_fails_clearly(int8: ChatTTSModel) -> None:
    model = load_model(ModelSource(load_format="dummy"), quant="int8")
    model.modules.gpt.to(torch.float32)  # drops the fused int8 copies
    with pytest.raises(CheckpointError, match="load the model again"):
        model.modules.gpt(torch.zeros(1, 2, 64), torch.arange(2)[None])


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(CheckpointError, match="--quant"):
        load_model(ModelSource(load_format="dummy"), quant="int4")
