"""Vocos against the official goldens (case i) and the n_samples = 512*T - 256 relation."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tests.golden import FIXTURE_DIR, case, fixture_config, tensors
from turbotts.config import model_config_from_dict
from turbotts.errors import InvalidInputError
from turbotts.model.melbank import mel_filterbank
from turbotts.model.vocos import MelFeatures, Vocos

TOL = 1e-5


@pytest.fixture(scope="module")
def vocos() -> Vocos:
    model = Vocos(model_config_from_dict(fixture_config(), None).vocos)
    model.load_state_dict(load_file(str(FIXTURE_DIR / "asset" / "Vocos.safetensors")), strict=True)
    return model.eval()


@pytest.mark.parametrize(
    ("wav_name", "mel_case", "mel_name"),
    [
        ("wav_from_dvae_mel", "h1_dvae_decode", "mel"),
        ("wav_from_decoder_mel", "h2_decoder_decode", "mel"),
        ("wav_from_decoder_mel_single_0", "h2_decoder_decode", "mel_single_0"),
        ("wav_from_decoder_mel_single_1", "h2_decoder_decode", "mel_single_1"),
    ],
)
def test_wav_matches_golden(vocos: Vocos, wav_name: str, mel_case: str, mel_name: str) -> None:
    mel = tensors(mel_case)[mel_name]
    expected = tensors("i_vocos_decode")[wav_name]
    wav = vocos.decode(mel)
    assert wav.shape == expected.shape
    torch.testing.assert_close(wav, expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("num_code_frames", [1, 2, 3, 24, 40])
def test_samples_per_code_frame(vocos: Vocos, num_code_frames: int) -> None:
    assert case("i_vocos_decode")["outputs"]["samples_per_code_frame"] == 512
    mel = torch.randn(2, 100, 2 * num_code_frames)  # (B, 100, 2T)
    assert vocos.decode(mel).shape == (2, 512 * num_code_frames - 256)


def test_rejects_bad_mel(vocos: Vocos) -> None:
    with pytest.raises(InvalidInputError, match="at least one code frame"):
        vocos.decode(torch.zeros(1, 100, 1))
    with pytest.raises(InvalidInputError, match="mel must be"):
        vocos.decode(torch.zeros(1, 80, 4))


def test_default_filterbank_is_the_checkpoint_one() -> None:
    stored = load_file(str(FIXTURE_DIR / "asset" / "Vocos.safetensors"))["feature_extractor.mel_spec.mel_scale.fb"]
    torch.testing.assert_close(mel_filterbank(n_fft=1024, n_mels=100, sample_rate_hz=24000), stored, atol=0, rtol=0)


def test_mel_features_shape_and_short_audio() -> None:
    features = MelFeatures()
    assert features(torch.randn(15104)).shape == (100, 60)
    assert features(torch.randn(3, 1000)).shape == (3, 100, 4)
    with pytest.raises(InvalidInputError, match="513 are needed"):
        features(torch.randn(512))
