"""The hidden-state Decoder: GPT hidden states (B, H, T) -> log-mel (B, 100, 2T).

Each GPT step stands for two mel frames, so the features of a code frame are
split in two halves that become consecutive mel frames (:func:`split_frames`)
before the conv stack runs at mel rate. The DVAE decoder is the same network
after its codes are turned into features, so :class:`turbotts.model.dvae.DVAE`
builds on :class:`HiddenDecoder`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from turbotts.config import ConvDecoderConfig
from turbotts.errors import InvalidInputError
from turbotts.model.convnext import ConvDecoder
from turbotts.model.vocos import Vocos

NUM_MELS = 100
MEL_FRAMES_PER_CODE = 2


def split_frames(x: torch.Tensor) -> torch.Tensor:
    """(B, C, T) -> (B, C/2, 2T): channels [k*C/2, (k+1)*C/2) of frame t become frame 2t+k."""
    batch, channels, num_frames = x.shape
    x = x.reshape(batch, MEL_FRAMES_PER_CODE, channels // MEL_FRAMES_PER_CODE, num_frames)  # (B, 2, C/2, T)
    x = x.permute(0, 2, 3, 1)  # (B, C/2, T, 2)
    return x.reshape(batch, channels // MEL_FRAMES_PER_CODE, num_frames * MEL_FRAMES_PER_CODE)  # (B, C/2, 2T)


class HiddenDecoder(nn.Module):
    """``Decoder.safetensors``: split frames -> ConvDecoder -> ``out_conv`` -> times ``coef``.

    Args:
        config: the conv stack; its ``idim`` is half the GPT hidden size.
    """

    coef: torch.Tensor

    def __init__(self, config: ConvDecoderConfig) -> None:
        super().__init__()
        self.input_channels = MEL_FRAMES_PER_CODE * config.idim
        self.register_buffer("coef", torch.ones(1, NUM_MELS, 1))
        self.decoder = ConvDecoder(config)
        self.out_conv = nn.Conv1d(config.odim, NUM_MELS, 3, 1, 1, bias=False)

    @property
    def receptive_radius(self) -> int:
        """Mel frames each side of an output mel frame that it depends on."""
        return self.decoder.receptive_radius + 1

    def mel_from_features(self, feats: torch.Tensor) -> torch.Tensor:
        """Per-code-frame features (B, 2*idim, T) float -> log-mel (B, 100, 2T)."""
        if feats.dim() != 3 or feats.shape[1] != self.input_channels:
            raise InvalidInputError(f"decoder input must be (B, {self.input_channels}, T); got {tuple(feats.shape)}")
        mel = self.out_conv(self.decoder(split_frames(feats)))  # (B, 100, 2T)
        return mel * self.coef

    @torch.inference_mode()
    def decode(self, hiddens: torch.Tensor) -> torch.Tensor:
        """GPT hidden states (B, hidden_size, T) float -> log-mel (B, 100, 2T).

        Raises:
            InvalidInputError: the channel count is not ``2 * idim``.
        """
        return self.mel_from_features(hiddens)

    def forward(self, hiddens: torch.Tensor) -> torch.Tensor:
        return self.decode(hiddens)


def context_code_frames(decoder: HiddenDecoder, vocos: Vocos) -> int:
    """Code frames of context each side that make a chunked decode exact.

    Decoding frames ``[s - n, e + n)`` and keeping samples ``[512 n, 512 (n + e - s))``
    gives the samples ``[512 s, 512 e)`` of a one-shot decode (float rounding aside):
    the mel-rate conv radii of both stacks plus the ISTFT overlap, in code frames
    (13 for the tiny checkpoint, 52 for the official sizes). With right context 0
    the chunk equals a decode of the prefix ``[0, e)``, which is what the official
    streaming emits.
    """
    mel_radius = decoder.receptive_radius + vocos.receptive_radius + vocos.istft_radius
    return math.ceil(mel_radius / MEL_FRAMES_PER_CODE)
