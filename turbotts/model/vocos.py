"""Vocos vocoder: log-mel (B, 100, F) -> 24 kHz waveform (B, hop * (F - 1)).

A ConvNeXt backbone predicts, per mel frame, a log-magnitude and a phase for
each STFT bin; ``torch.istft`` turns that spectrum into samples. The log-mel
front end (:class:`MelFeatures`) lives here too because the DVAE encoder uses
the same one, with its own copy of the filterbank in its checkpoint.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from turbotts.config import VocosConfig
from turbotts.errors import InvalidInputError
from turbotts.model.convnext import ConvNeXtBlock
from turbotts.model.melbank import mel_filterbank

MAX_MAGNITUDE = 100.0  # the official head clips exp(log-magnitude) here
LOG_FLOOR = 1e-5


class _Spectrogram(nn.Module):
    window: torch.Tensor

    def __init__(self, n_fft: int) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(n_fft))


class _MelScale(nn.Module):
    fb: torch.Tensor

    def __init__(self, n_fft: int, n_mels: int, sample_rate_hz: int) -> None:
        super().__init__()
        self.register_buffer("fb", mel_filterbank(n_fft=n_fft, n_mels=n_mels, sample_rate_hz=sample_rate_hz))


class _MelSpec(nn.Module):
    """Holds the buffers under the checkpoint names ``mel_spec.{spectrogram.window, mel_scale.fb}``."""

    def __init__(self, n_fft: int, n_mels: int, sample_rate_hz: int) -> None:
        super().__init__()
        self.spectrogram = _Spectrogram(n_fft)
        self.mel_scale = _MelScale(n_fft, n_mels, sample_rate_hz)


class MelFeatures(nn.Module):
    """Natural-log mel magnitude (power 1), STFT centred with reflect padding."""

    def __init__(self, n_fft: int = 1024, hop_length: int = 256, n_mels: int = 100, sample_rate_hz: int = 24000):
        super().__init__()
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.mel_spec = _MelSpec(n_fft, n_mels, sample_rate_hz)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """(..., num_samples) float -> (..., n_mels, num_samples // hop + 1).

        Raises:
            InvalidInputError: the audio is too short for the reflect padding.
        """
        num_samples = audio.shape[-1]
        if num_samples <= self.n_fft // 2:
            raise InvalidInputError(
                f"audio has {num_samples} samples; at least {self.n_fft // 2 + 1} are needed "
                "for a mel spectrogram: pass a longer reference clip"
            )
        lead = audio.shape[:-1]
        flat = audio.reshape(-1, num_samples)  # (N, num_samples)
        window = self.mel_spec.spectrogram.window
        fb = self.mel_spec.mel_scale.fb
        spec = torch.stft(
            flat, self.n_fft, self.hop_length, self.n_fft, window, center=True, pad_mode="reflect", return_complex=True
        ).abs()  # (N, n_fft/2+1, F)
        mel = torch.matmul(spec.transpose(1, 2), fb).transpose(1, 2)  # (N, n_mels, F)
        return torch.log(torch.clamp(mel, min=LOG_FLOOR)).reshape(*lead, mel.shape[1], mel.shape[2])


class VocosBackbone(nn.Module):
    """Conv embed -> LayerNorm -> ConvNeXt blocks (dilation 1) -> LayerNorm."""

    def __init__(self, config: VocosConfig) -> None:
        super().__init__()
        self.embed = nn.Conv1d(config.input_channels, config.dim, kernel_size=7, padding=3)
        self.norm = nn.LayerNorm(config.dim, eps=1e-6)
        layer_scale = 1.0 / config.num_layers
        self.convnext = nn.ModuleList(
            ConvNeXtBlock(config.dim, config.intermediate_dim, 1, "gamma", layer_scale)
            for _ in range(config.num_layers)
        )
        self.final_layer_norm = nn.LayerNorm(config.dim, eps=1e-6)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """(B, input_channels, F) -> (B, F, dim)."""
        x = self.norm(self.embed(mel).transpose(1, 2)).transpose(1, 2)  # (B, dim, F)
        for block in self.convnext:
            x = block(x)
        return self.final_layer_norm(x.transpose(1, 2))  # (B, F, dim)


class _ISTFT(nn.Module):
    window: torch.Tensor

    def __init__(self, n_fft: int) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(n_fft))


class ISTFTHead(nn.Module):
    """Linear -> (log-magnitude, phase) per bin -> ``torch.istft(center=True)``."""

    def __init__(self, config: VocosConfig) -> None:
        super().__init__()
        self.n_fft = config.n_fft
        self.hop_length = config.hop_length
        self.out = nn.Linear(config.dim, config.n_fft + 2)
        self.istft = _ISTFT(config.n_fft)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, F, dim) -> (B, hop * (F - 1))."""
        num_bins = self.n_fft // 2 + 1
        y = self.out(x).transpose(1, 2)  # (B, n_fft + 2, F)
        magnitude = torch.exp(y[:, :num_bins]).clamp(max=MAX_MAGNITUDE)  # (B, bins, F)
        phase = y[:, num_bins:]  # (B, bins, F)
        spectrum = torch.polar(magnitude, phase)  # (B, bins, F) complex
        return torch.istft(spectrum, self.n_fft, self.hop_length, self.n_fft, self.istft.window, center=True)


class Vocos(nn.Module):
    """The Vocos vocoder with the official parameter names (``Vocos.safetensors``, strict)."""

    def __init__(self, config: VocosConfig) -> None:
        super().__init__()
        self.config = config
        self.feature_extractor = MelFeatures(
            config.n_fft, config.hop_length, config.input_channels, config.sample_rate_hz
        )
        self.backbone = VocosBackbone(config)
        self.head = ISTFTHead(config)

    @property
    def receptive_radius(self) -> int:
        """Mel frames each side of a frame's spectrum that it depends on (embed + blocks)."""
        return 3 + 3 * self.config.num_layers

    @property
    def istft_radius(self) -> int:
        """Mel frames each side of an output sample that overlap it in the ISTFT."""
        return math.ceil(self.config.n_fft / 2 / self.config.hop_length)

    @torch.inference_mode()
    def decode(self, mel: torch.Tensor) -> torch.Tensor:
        """Log-mel (B, input_channels, F) float -> waveform (B, hop * (F - 1)) float.

        Raises:
            InvalidInputError: not (B, input_channels, F) with F >= 2 (one code frame).
        """
        if mel.dim() != 3 or mel.shape[1] != self.config.input_channels:
            raise InvalidInputError(f"mel must be (B, {self.config.input_channels}, F); got {tuple(mel.shape)}")
        if mel.shape[2] < 2:
            raise InvalidInputError(f"mel has {mel.shape[2]} frames; decode at least one code frame (2 mel frames)")
        return self.head(self.backbone(mel))

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.decode(mel)
