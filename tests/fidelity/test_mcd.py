from __future__ import annotations

import numpy as np
import pytest
import torch

from turbotts.fidelity.agreement import code_agreement, mean_kl
from turbotts.fidelity.mcd import NUM_CEPS, mcd_db, mel_cepstrum


def _tone(freq_hz: float, seconds: float = 0.5, rate: int = 24000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


def test_identical_audio_has_zero_mcd() -> None:
    wav = _tone(220) + np.random.default_rng(0).normal(0, 0.01, 12000).astype(np.float32)
    assert mcd_db(wav, wav.copy()) == 0.0


def test_different_audio_has_positive_mcd() -> None:
    a, b = _tone(220), _tone(880)
    noisy = a + np.random.default_rng(1).normal(0, 0.05, len(a)).astype(np.float32)
    assert mcd_db(a, b) > 1.0
    assert 0 < mcd_db(a, a + 1e-4 * np.random.default_rng(2).normal(size=len(a)).astype(np.float32)) < mcd_db(a, noisy)


def test_cepstrum_shape_and_bad_input() -> None:
    assert mel_cepstrum(_tone(440)).shape[1] == NUM_CEPS
    with pytest.raises(ValueError, match="mono"):
        mel_cepstrum(np.zeros((2, 100)))


def test_agreement_and_kl() -> None:
    logits = torch.randn(10, 4, 626)
    assert code_agreement(logits, logits) == 1.0 and mean_kl(logits, logits) == pytest.approx(0.0, abs=1e-12)
    assert mean_kl(logits, torch.randn(10, 4, 626)) > 0.1
