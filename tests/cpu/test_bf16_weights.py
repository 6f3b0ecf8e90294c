"""The bf16 vocoder's weights are cast once, with exactly autocast's results, and shared by engines."""

from __future__ import annotations

import sys
from functools import cache

import pytest
import torch
from torch import nn

from tests.golden import FIXTURE_DIR
from tests.model.test_file_views import mapping_of
from turbotts.cpu.bf16_weights import CAST_LAYERS, bf16_audio_decoders, cast_sources, with_bf16_weights
from turbotts.engine.vocoder_runner import VocoderRunner
from turbotts.model.chattts import ChatTTSModel
from turbotts.sources import ModelSource, load_model


@cache
def model() -> ChatTTSModel:
    return load_model(ModelSource(checkpoint=FIXTURE_DIR))


def _autocast_audio(frames: torch.Tensor, *, use_decoder: bool) -> torch.Tensor:
    """What the bf16 vocoder computed before: the fp32 modules under autocast."""
    modules = model().modules
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        if use_decoder:
            mel = modules.decoder.decode(frames.float().transpose(1, 2))
        else:
            mel = modules.dvae.decode(frames.long().transpose(1, 2))
        return modules.vocos.decode(mel.float()).float()


@pytest.mark.parametrize("use_decoder", [True, False], ids=["decoder", "dvae"])
def test_cast_once_gives_autocasts_audio_bit_for_bit(use_decoder: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    gpt = model().config.gpt
    if use_decoder:
        frames = torch.randn(2, 20, gpt.hidden_size, generator=gen)
    else:
        frames = torch.randint(0, gpt.num_audio_tokens - 1, (2, 20, gpt.num_vq), generator=gen)
    want = _autocast_audio(frames, use_decoder=use_decoder)
    runner = VocoderRunner(model(), "bf16")
    with torch.inference_mode():
        got = runner.frames_to_audio(frames, use_decoder)
    assert torch.equal(got, want)
    assert float(want.abs().max()) > 0


def test_the_copy_casts_only_linear_and_conv_weights_and_shares_the_rest() -> None:
    original = model().modules.vocos
    copy = with_bf16_weights(original)
    cast = [p for m in copy.modules() if isinstance(m, CAST_LAYERS) for p in m.parameters(recurse=False)]
    assert cast and all(p.dtype == torch.bfloat16 for p in cast)
    assert all(p.dtype == torch.float32 for p in original.parameters())  # the original is untouched
    originals = dict(original.named_parameters())
    shared = [name for name, p in copy.named_parameters() if p.dtype == torch.float32]
    assert shared  # norms and scales stay fp32 ...
    for name in shared:  # ... and are the original tensors, not copies
        assert dict(copy.named_parameters())[name].data_ptr() == originals[name].data_ptr()
    assert isinstance(copy, nn.Module) and copy is not original


def test_engines_share_one_copy_and_fp32_keeps_the_loaded_modules() -> None:
    first, second = VocoderRunner(model(), "bf16"), VocoderRunner(model(), "bf16")
    assert first.vocos is second.vocos is bf16_audio_decoders(model().modules).vocos
    assert first.vocos is not model().modules.vocos
    plain = VocoderRunner(model(), "fp32")
    assert plain.vocos is model().modules.vocos and plain.decoder is model().modules.decoder


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_the_replaced_fp32_weights_move_to_an_unlinked_file_and_still_compute() -> None:
    own = load_model(ModelSource(checkpoint=FIXTURE_DIR))  # a model of its own: the spill happens once per model
    vocos = own.modules.vocos
    mel = torch.randn(1, 100, 16, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        before = vocos.decode(mel)
    bf16_audio_decoders(own.modules)
    sources = cast_sources(vocos)
    assert sources and all("turbotts-spill-" in mapping_of(p.data_ptr()) for p in sources)
    assert "turbotts-spill-" not in mapping_of(vocos.backbone.norm.weight.data_ptr())  # only what the copy replaced
    with torch.inference_mode():
        assert torch.equal(vocos.decode(mel), before)  # read back from the file, unchanged
