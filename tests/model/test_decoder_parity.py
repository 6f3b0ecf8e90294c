"""The hidden-state Decoder against the official goldens (case h2)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tests.golden import FIXTURE_DIR, fixture_config, tensors
from turbotts.config import ConvDecoderConfig, VocosConfig, model_config_from_dict
from turbotts.errors import InvalidInputError
from turbotts.model.decoder import HiddenDecoder, context_code_frames, split_frames
from turbotts.model.vocos import Vocos

TOL = 1e-5


@pytest.fixture(scope="module")
def decoder() -> HiddenDecoder:
    config = model_config_from_dict(fixture_config(), None).decoder
    model = HiddenDecoder(config)
    model.load_state_dict(load_file(str(FIXTURE_DIR / "asset" / "Decoder.safetensors")), strict=True)
    return model.eval()


def test_batched_mel_matches_golden(decoder: HiddenDecoder) -> None:
    golden = tensors("h2_decoder_decode")
    mel = decoder.decode(golden["hiddens"])
    assert mel.shape == golden["mel"].shape == (2, 100, 80)
    torch.testing.assert_close(mel, golden["mel"], atol=TOL, rtol=0)


@pytest.mark.parametrize(("index", "num_frames"), [(0, 40), (1, 3)])
def test_single_mel_matches_golden(decoder: HiddenDecoder, index: int, num_frames: int) -> None:
    golden = tensors("h2_decoder_decode")
    hiddens = golden["hiddens"][index : index + 1, :, :num_frames]  # (1, 64, T_i)
    mel = decoder.decode(hiddens)
    torch.testing.assert_close(mel, golden[f"mel_single_{index}"], atol=TOL, rtol=0)


def test_split_frames_interleaves_channel_halves() -> None:
    x = torch.arange(2 * 4 * 3).reshape(2, 4, 3)  # (B, C, T)
    y = split_frames(x)  # (B, C/2, 2T)
    assert y.shape == (2, 2, 6)
    for t in range(3):
        torch.testing.assert_close(y[:, :, 2 * t], x[:, :2, t])
        torch.testing.assert_close(y[:, :, 2 * t + 1], x[:, 2:, t])


def test_wrong_width_raises(decoder: HiddenDecoder) -> None:
    with pytest.raises(InvalidInputError, match="decoder input must be"):
        decoder.decode(torch.zeros(1, 32, 5))


def test_receptive_radius_bounds_the_dependency() -> None:
    torch.manual_seed(0)
    model = HiddenDecoder(ConvDecoderConfig(idim=8, odim=8, hidden=8, n_layer=2, bn_dim=4)).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.5)
    x = torch.randn(1, 16, 40)
    y = model.decode(x)
    x2 = x.clone()
    x2[:, :, 20] += 1.0  # touches mel frames 40 and 41
    changed = (model.decode(x2) - y).abs().amax(dim=1)[0] > 0  # (2T,)
    frames = changed.nonzero().flatten()
    assert frames.min() == 40 - model.receptive_radius
    assert frames.max() == 41 + model.receptive_radius


def _tiny_vocos() -> Vocos:
    model = Vocos(model_config_from_dict(fixture_config(), None).vocos)
    model.load_state_dict(load_file(str(FIXTURE_DIR / "asset" / "Vocos.safetensors")), strict=True)
    return model.eval()


def test_chunked_decode_with_context_equals_one_shot(decoder: HiddenDecoder) -> None:
    vocos = _tiny_vocos()
    context = context_code_frames(decoder, vocos)
    assert context == 13
    assert context_code_frames(HiddenDecoder(ConvDecoderConfig()), Vocos(VocosConfig())) == 52
    torch.manual_seed(0)
    hiddens = torch.randn(1, 64, 80)  # (B, H, T)
    one_shot = vocos.decode(decoder.decode(hiddens))[0]  # (512*80 - 256,)
    start, end = 30, 45
    chunk = vocos.decode(decoder.decode(hiddens[:, :, start - context : end + context]))[0]
    kept = chunk[512 * context : 512 * (context + end - start)]  # samples [512*start, 512*end)
    torch.testing.assert_close(kept, one_shot[512 * start : 512 * end], atol=1e-6, rtol=0)
    prefix = vocos.decode(decoder.decode(hiddens[:, :, :end]))[0]
    no_lookahead = vocos.decode(decoder.decode(hiddens[:, :, start - context : end]))[0]
    torch.testing.assert_close(no_lookahead[512 * context :], prefix[512 * start :], atol=1e-6, rtol=0)
