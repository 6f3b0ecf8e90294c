"""The exported vocoder graph (Decoder + Vocos, iSTFT by matmul) gives torch's audio at any batch and length.

Tolerance: both sides run the same fp32 arithmetic in a different order (other GEMM and conv
kernels, fused LayerNorm and GELU, a DFT matmul for torch's FFT), so they differ by float rounding:
at most 4e-7 on the tiny model's 0.3-peak audio. TOLERANCE is 25 times that, and 1000 times below
what dropping a single ConvNeXt block changes (checked below), so a graph that lost a layer, fixed
an axis or mixed up one fails.
"""

from __future__ import annotations

import copy
from typing import TypeVar

import numpy as np
import pytest
import torch
from torch import nn

from turbotts.bench.ort_vocoder import export_onnx, load_audio_decoders, ort_audio, ort_session, torch_audio
from turbotts.model.decoder import HiddenDecoder
from turbotts.model.vocos import Vocos

pytest.importorskip("onnxruntime", reason="onnxruntime not installed: pip install 'turbotts[ort]'")
pytest.importorskip("onnxscript", reason="onnxscript not installed: pip install 'turbotts[ort]'")

TOLERANCE = 1e-5  # absolute, on audio of peak about 0.3
ModuleT = TypeVar("ModuleT", bound=nn.Module)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[HiddenDecoder, Vocos, object]:
    decoder, vocos = load_audio_decoders("tiny")
    path = export_onnx(decoder, vocos, tmp_path_factory.mktemp("ort") / "vocoder.onnx")  # example input (2, 16)
    return decoder, vocos, ort_session(path)


def _frames(batch: int, num_frames: int, channels: int) -> torch.Tensor:
    return torch.randn(batch, num_frames, channels, generator=torch.Generator().manual_seed(7 * batch + num_frames))


@pytest.mark.parametrize("num_frames", [12, 37])
@pytest.mark.parametrize("batch", [1, 3])
def test_onnx_audio_equals_torch_at_other_batches_and_lengths(
    exported: tuple[HiddenDecoder, Vocos, object], batch: int, num_frames: int
) -> None:
    decoder, vocos, session = exported
    frames = _frames(batch, num_frames, decoder.input_channels)
    want = torch_audio(decoder, vocos, frames).numpy()
    got = ort_audio(session, frames)
    assert got.shape == want.shape == (batch, 512 * num_frames - 256)
    assert np.abs(want).max() > 0.05  # real audio, not a silent output that any graph would match
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE)


def _without_last_block(module: ModuleT, blocks: str) -> ModuleT:
    broken = copy.deepcopy(module)
    layers = broken.get_submodule(blocks)
    assert isinstance(layers, nn.ModuleList)
    del layers[len(layers) - 1]
    return broken


def test_a_dropped_layer_is_far_outside_the_tolerance(exported: tuple[HiddenDecoder, Vocos, object]) -> None:
    decoder, vocos, _ = exported
    frames = _frames(3, 37, decoder.input_channels)
    want = torch_audio(decoder, vocos, frames).numpy()
    for broken_decoder, broken_vocos in (
        (_without_last_block(decoder, "decoder.decoder_block"), vocos),
        (decoder, _without_last_block(vocos, "backbone.convnext")),
    ):
        change = np.abs(torch_audio(broken_decoder, broken_vocos, frames).numpy() - want).max()
        assert change > 1000 * TOLERANCE
