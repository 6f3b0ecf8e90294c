"""The triangular mel filterbank Vocos and the DVAE were trained with (HTK mel
scale, no area normalization), so dummy checkpoints carry the real one."""

from __future__ import annotations

import math

import torch


def _hz_to_mel(freq_hz: float) -> float:
    return 2595.0 * math.log10(1.0 + freq_hz / 700.0)


def _mel_to_hz(mel: torch.Tensor) -> torch.Tensor:
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


def mel_filterbank(*, n_fft: int = 1024, n_mels: int = 100, sample_rate_hz: int = 24000) -> torch.Tensor:
    """(n_fft // 2 + 1, n_mels) float32 filterbank from 0 Hz to Nyquist."""
    num_freqs = n_fft // 2 + 1
    all_freqs = torch.linspace(0, sample_rate_hz // 2, num_freqs, dtype=torch.float32)
    mel_edges = torch.linspace(
        _hz_to_mel(0.0),
        _hz_to_mel(sample_rate_hz / 2.0),
        n_mels + 2,
        dtype=torch.float32,
    )
    hz_edges = _mel_to_hz(mel_edges)
    widths = hz_edges[1:] - hz_edges[:-1]  # (n_mels + 1,)
    slopes = hz_edges.unsqueeze(0) - all_freqs.unsqueeze(1)  # (num_freqs, n_mels + 2)
    rising = -slopes[:, :-2] / widths[:-1]
    falling = slopes[:, 2:] / widths[1:]
    return torch.clamp(torch.minimum(rising, falling), min=0.0).float()
