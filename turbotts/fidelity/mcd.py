"""Mel-cepstral distortion (MCD) between two waveforms, with our own mel cepstrum.

Why our own: no extra dependency, and the same numbers on every machine. The
cepstrum is the DCT-II (orthonormal) of the natural-log mel spectrum from a
Hann-windowed STFT; MCD is the standard
``10 / ln 10 * sqrt(2 * sum_{d=1..24} (c_d - c'_d)^2)`` averaged over frames.
Coefficient 0 (overall energy) is left out as usual. Frames are compared
one to one (no time warping): callers compare audio of the same codes or the
same deterministic synthesis, so the frames line up.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from turbotts.model.melbank import mel_filterbank

N_FFT = 1024
HOP = 256
N_MELS = 80
NUM_CEPS = 25  # c0..c24; MCD uses c1..c24
LOG_FLOOR = 1e-5
MCD_SCALE = 10.0 / math.log(10.0) * math.sqrt(2.0)


def _dct_matrix(n_in: int, n_out: int) -> torch.Tensor:
    """(n_in, n_out) orthonormal DCT-II basis."""
    n = torch.arange(n_in, dtype=torch.float64)
    k = torch.arange(n_out, dtype=torch.float64)
    basis = torch.cos(math.pi / n_in * (n[:, None] + 0.5) * k[None, :]) * math.sqrt(2.0 / n_in)
    basis[:, 0] /= math.sqrt(2.0)
    return basis


def mel_cepstrum(audio: np.ndarray, sample_rate_hz: int = 24000) -> np.ndarray:
    """(T_frames, 25) float64 mel cepstrum (c0..c24) of a mono waveform.

    Raises:
        ValueError: the audio is not 1-D.
    """
    wav = torch.as_tensor(np.asarray(audio, dtype=np.float64))
    if wav.dim() != 1:
        raise ValueError(f"mel_cepstrum wants mono audio (1-D), got shape {tuple(wav.shape)}")
    if wav.numel() < N_FFT:
        wav = torch.nn.functional.pad(wav, (0, N_FFT - wav.numel()))
    spec = torch.stft(wav, N_FFT, HOP, window=torch.hann_window(N_FFT, dtype=torch.float64), return_complex=True)
    power = spec.abs().pow(2).T  # (T, n_fft/2 + 1)
    fb = mel_filterbank(n_fft=N_FFT, n_mels=N_MELS, sample_rate_hz=sample_rate_hz).double()  # (F, n_mels)
    log_mel = torch.log(torch.clamp(power @ fb, min=LOG_FLOOR))  # (T, n_mels)
    return (log_mel @ _dct_matrix(N_MELS, NUM_CEPS)).numpy()  # (T, 25)


def mcd_from_cepstra(reference: np.ndarray, test: np.ndarray) -> float:
    """MCD in dB between two (T, 25) cepstra over their common first frames."""
    num_frames = min(len(reference), len(test))
    if num_frames == 0:
        return 0.0 if len(reference) == len(test) else float("inf")
    diff = reference[:num_frames, 1:] - test[:num_frames, 1:]  # (T, 24)
    return float(np.mean(MCD_SCALE * np.sqrt(np.sum(diff**2, axis=1))))


def mcd_db(reference: np.ndarray, test: np.ndarray, sample_rate_hz: int = 24000) -> float:
    """MCD (dB) of ``test`` against ``reference`` (0 for identical audio)."""
    return mcd_from_cepstra(mel_cepstrum(reference, sample_rate_hz), mel_cepstrum(test, sample_rate_hz))
