"""The DVAE: audio codes <-> log-mel, with grouped residual FSQ in between.

``decode`` turns the GPT's 4 code streams into mel (the non-Decoder path); ``encode``
turns a reference waveform into codes for a zero-shot voice prompt. The FSQ
codebook is implicit (no weights): an index is a base-``L`` number whose digits
are the quantized coordinates, so only ``project_in``/``project_out`` are learned.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn

from turbotts.config import DVAEConfig, VQConfig
from turbotts.errors import InvalidInputError
from turbotts.model.convnext import ConvDecoder
from turbotts.model.decoder import NUM_MELS, HiddenDecoder
from turbotts.model.vocos import MelFeatures

SOFT_CLAMP = 1.25  # tanh soft clamp of the projected input (vector_quantize_pytorch ResidualFSQ)


class _ResidualFSQ(nn.Module):
    """One group: ``project_in`` (dim/G -> len(levels)), R residual FSQ stages, ``project_out``."""

    project_in: nn.Linear
    project_out: nn.Linear

    def __init__(self, group_dim: int, num_levels: int) -> None:
        super().__init__()
        self.project_in = nn.Linear(group_dim, num_levels)
        self.project_out = nn.Linear(num_levels, group_dim)


class _GroupedResidualFSQ(nn.Module):
    def __init__(self, config: VQConfig) -> None:
        super().__init__()
        self.rvqs = nn.ModuleList(_ResidualFSQ(config.dim // config.G, len(config.levels)) for _ in range(config.G))


class GFSQ(nn.Module):
    """Grouped residual FSQ; code column ``q = g * R + r`` (group g, residual stage r).

    Stage r works at scale ``L ** -r`` per coordinate (vector_quantize_pytorch 1.32.0;
    releases before it used ``(L - 1) ** -r``, which gives different features).
    """

    levels: torch.Tensor  # (n_levels,) int64
    basis: torch.Tensor  # (n_levels,) int64, place value of each digit
    scales: torch.Tensor  # (R, n_levels) float, L ** -r

    def __init__(self, config: VQConfig) -> None:
        super().__init__()
        self.config = config
        self.quantizer = _GroupedResidualFSQ(config)
        levels = torch.tensor(config.levels, dtype=torch.int64)
        basis = torch.cumprod(torch.tensor((1, *config.levels[:-1]), dtype=torch.int64), 0)
        scales = torch.stack([levels.double() ** -r for r in range(config.R)]).float()  # (R, n_levels)
        self.register_buffer("levels", levels, persistent=False)
        self.register_buffer("basis", basis, persistent=False)
        self.register_buffer("scales", scales, persistent=False)

    @property
    def groups(self) -> list[_ResidualFSQ]:
        """The per-group projections, typed."""
        return [cast(_ResidualFSQ, rvq) for rvq in self.quantizer.rvqs]

    @property
    def num_codes(self) -> int:
        """Indices per stage (625 for levels 5,5,5,5)."""
        return math.prod(self.config.levels)

    def _codes_from_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """(..., ) int -> (..., n_levels) code values in [-1, 1]."""
        levels, basis = self.levels, self.basis
        digits = (indices.unsqueeze(-1) // basis) % levels  # (..., n_levels)
        half = (levels - 1).float() / 2
        return (digits.float() - half) / half

    def _indices_from_codes(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., n_levels) float -> (index (...), quantized code values (..., n_levels))."""
        levels, basis = self.levels, self.basis
        steps = (levels - 1).float()
        bracket = torch.floor(steps * (z.clamp(-1.0, 1.0) + 1.0) / 2.0 + 0.5)  # (..., n_levels)
        codes = 2.0 * bracket / steps - 1.0
        return (bracket.long() * basis).sum(-1), codes

    def dequantize(self, codes: torch.Tensor) -> torch.Tensor:
        """Indices (B, G*R, T) int -> features (B, dim, T) float."""
        g_count, r_count = self.config.G, self.config.R
        batch, num_q, num_frames = codes.shape
        if num_q != g_count * r_count:
            raise InvalidInputError(f"codes must be (B, {g_count * r_count}, T); got {tuple(codes.shape)}")
        if codes.min() < 0 or codes.max() >= self.num_codes:
            raise InvalidInputError(f"codes must lie in [0, {self.num_codes}); strip EOS ids before decoding")
        grouped = codes.reshape(batch, g_count, r_count, num_frames).permute(1, 0, 3, 2)  # (G, B, T, R)
        scales = self.scales
        values = self._codes_from_indices(grouped) * scales  # (G, B, T, R, n_levels)
        summed = values.sum(3)  # (G, B, T, n_levels)
        feats = [rvq.project_out(summed[g]) for g, rvq in enumerate(self.groups)]  # G x (B, T, dim/G)
        return torch.cat(feats, dim=-1).transpose(1, 2)  # (B, dim, T)

    def quantize(self, feats: torch.Tensor) -> torch.Tensor:
        """Features (B, dim, T) float -> indices (B, G*R, T) int64."""
        x = feats.transpose(1, 2)  # (B, T, dim)
        scales = self.scales
        per_group = []
        for chunk, rvq in zip(x.chunk(self.config.G, dim=-1), self.groups, strict=True):
            residual = torch.tanh(rvq.project_in(chunk) / SOFT_CLAMP) * SOFT_CLAMP  # (B, T, n_levels)
            stages = []
            for r in range(self.config.R):
                index, code = self._indices_from_codes(residual / scales[r])
                residual = residual - code * scales[r]
                stages.append(index)  # (B, T)
            per_group.append(torch.stack(stages, dim=-1))  # (B, T, R)
        indices = torch.stack(per_group, dim=2)  # (B, T, G, R)
        return indices.flatten(2).transpose(1, 2)  # (B, G*R, T)


class DVAE(HiddenDecoder):
    """``DVAE.safetensors`` (strict): FSQ codes <-> mel, plus the reference-audio encoder.

    Args:
        config: encoder/decoder conv stacks and the FSQ layout.
    """

    def __init__(self, config: DVAEConfig) -> None:
        super().__init__(config.decoder)
        if config.vq.dim != self.input_channels:
            raise InvalidInputError(f"vq dim {config.vq.dim} must be twice the DVAE decoder idim {config.decoder.idim}")
        self.config = config
        enc_dim = config.encoder.idim
        self.downsample_conv = nn.Sequential(
            nn.Conv1d(NUM_MELS, enc_dim, 3, 1, 1),
            nn.GELU(),
            nn.Conv1d(enc_dim, enc_dim, 4, 2, 1),
            nn.GELU(),
        )
        self.preprocessor_mel = MelFeatures()
        self.encoder = ConvDecoder(config.encoder)
        self.vq_layer = GFSQ(config.vq)

    @property
    def num_vq(self) -> int:
        return self.config.vq.G * self.config.vq.R

    def codes_to_features(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes (B, num_vq, T) int -> FSQ features (B, vq_dim, T) (``vq_feats`` in the goldens)."""
        return self.vq_layer.dequantize(codes)

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Audio codes (B, num_vq, T) int64 in [0, 625) -> log-mel (B, 100, 2T) float.

        Raises:
            InvalidInputError: wrong shape or an index outside the codebook (such as EOS 625).
        """
        return self.mel_from_features(self.codes_to_features(codes))

    @torch.inference_mode()
    def encode(self, wav: torch.Tensor) -> torch.Tensor:
        """Reference audio (num_samples,) or (B, num_samples) float at 24 kHz -> codes (num_vq, T) / (B, num_vq, T).

        ``T = (num_samples // 256 + 1) // 2`` (the centred STFT's frames, halved by the
        stride-2 conv), so a clip of ``512*T - 256`` samples (a decode of T frames)
        gives back T frames.

        Raises:
            InvalidInputError: fewer than 513 samples.
        """
        is_single = wav.dim() == 1
        batch = wav.reshape(1, -1) if is_single else wav  # (B, N)
        mel = self.preprocessor_mel(batch.float()) / self.coef  # (B, 100, F)
        feats = self.encoder(self.downsample_conv(mel))  # (B, vq_dim, F//2)
        codes = self.vq_layer.quantize(feats)  # (B, num_vq, T)
        return codes[0] if is_single else codes
