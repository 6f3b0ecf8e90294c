"""ConvNeXt 1-D blocks and the conv stack shared by the Decoder and the DVAE.

ChatTTS and Vocos use the same block with two differences that matter for
loading checkpoints: the DVAE/Decoder blocks dilate the depthwise conv by 2 and
call the layer scale ``weight``, the Vocos blocks use dilation 1 and call it
``gamma``. One class covers both so the arithmetic is written once.
"""

from __future__ import annotations

import torch
from torch import nn

from turbotts.config import ConvDecoderConfig

KERNEL_SIZE = 7


class ConvNeXtBlock(nn.Module):
    """Depthwise conv -> LayerNorm -> MLP (exact GELU) -> layer scale, plus a residual.

    Args:
        dim: channels in and out.
        intermediate_dim: width of the pointwise MLP.
        dilation: dilation of the kernel-7 depthwise conv (padding keeps the length).
        layer_scale_name: checkpoint name of the per-channel scale (``weight`` or ``gamma``).
        layer_scale_init: initial scale value (only matters for random init).
    """

    def __init__(
        self,
        dim: int,
        intermediate_dim: int,
        dilation: int = 2,
        layer_scale_name: str = "weight",
        layer_scale_init: float = 1e-6,
    ) -> None:
        super().__init__()
        self.dwconv = nn.Conv1d(
            dim, dim, KERNEL_SIZE, padding=dilation * (KERNEL_SIZE // 2), dilation=dilation, groups=dim
        )
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(intermediate_dim, dim)
        self.layer_scale_name = layer_scale_name
        self.register_parameter(layer_scale_name, nn.Parameter(torch.full((dim,), layer_scale_init)))

    @property
    def receptive_radius(self) -> int:
        """Frames each side of an output that its value depends on."""
        return self.dwconv.dilation[0] * (KERNEL_SIZE // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, T) -> (B, C, T)."""
        scale: torch.Tensor = getattr(self, self.layer_scale_name)
        y = self.dwconv(x).transpose(1, 2)  # (B, T, C)
        y = self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        y = (y * scale).transpose(1, 2)  # (B, C, T)
        return x + y


class ConvDecoder(nn.Module):
    """``conv_in`` -> ConvNeXt blocks (dilation 2) -> 1x1 ``conv_out``.

    The official code calls this ``DVAEDecoder`` and uses it three times: the
    hidden-state Decoder, the DVAE decoder and the DVAE encoder. Parameter names
    match the checkpoint keys below the ``decoder.`` / ``encoder.`` prefix.
    """

    def __init__(self, config: ConvDecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.conv_in = nn.Sequential(
            nn.Conv1d(config.idim, config.bn_dim, 3, 1, 1),
            nn.GELU(),
            nn.Conv1d(config.bn_dim, config.hidden, 3, 1, 1),
        )
        self.decoder_block = nn.ModuleList(
            ConvNeXtBlock(config.hidden, 4 * config.hidden, dilation=2) for _ in range(config.n_layer)
        )
        self.conv_out = nn.Conv1d(config.hidden, config.odim, kernel_size=1, bias=False)

    @property
    def receptive_radius(self) -> int:
        """Input frames each side of an output frame that it depends on."""
        return 2 + self.config.n_layer * 2 * (KERNEL_SIZE // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, idim, T) -> (B, odim, T)."""
        y = self.conv_in(x)  # (B, hidden, T)
        for block in self.decoder_block:
            y = block(y)
        return self.conv_out(y)
