"""Frames -> waveform: Decoder (hidden states) or DVAE (codes) to mel, then Vocos.

Windows of equal length and kind are decoded in one batched call; windows of
different lengths are never zero-padded together, because padding would leak
into the last frames of the shorter ones (the official batch decode does that).

On CPU the vocoder's matmuls are a sizeable share of the work per audio frame
next to the GPT's, so ``bf16`` (autocast; native on CPUs with AVX512-BF16 and on
GPUs) makes it markedly faster, at a measured max error of about 6e-3 on a 0.35-peak signal
(random full-size weights). fp32 stays the default: it is exact to the official.
With bf16 the modules' weights are cast once (:mod:`turbotts.cpu.bf16_weights`),
not by autocast on every call: a chunk decode is bound by its weight reads.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from turbotts.cpu.bf16_weights import AudioDecoders, bf16_audio_decoders
from turbotts.engine.streaming import DecodeWindow
from turbotts.model.chattts import ChatTTSModel


class VocoderRunner:
    def __init__(self, model: ChatTTSModel, dtype: str = "fp32") -> None:
        self.device = model.device
        self.is_bf16 = dtype == "bf16"
        modules = model.modules
        plain = AudioDecoders(modules.decoder, modules.dvae, modules.vocos)
        self.decoder, self.dvae, self.vocos = bf16_audio_decoders(modules) if self.is_bf16 else plain

    @torch.inference_mode()
    def decode(self, windows: list[DecodeWindow]) -> list[np.ndarray]:
        """Audio (float32, 24 kHz) of each window's kept range, in input order."""
        groups: dict[tuple[bool, int], list[int]] = defaultdict(list)
        for index, window in enumerate(windows):
            groups[(window.use_decoder, window.frames.shape[0])].append(index)
        out: list[np.ndarray] = [np.zeros(0, dtype=np.float32)] * len(windows)
        for (use_decoder, _), indices in groups.items():
            frames = torch.stack([windows[i].frames for i in indices]).to(self.device)  # (B, T, C)
            wavs = self.frames_to_audio(frames, use_decoder)  # (B, 512*T - 256)
            for row, i in enumerate(indices):
                out[i] = wavs[row, windows[i].keep_from : windows[i].keep_to].float().cpu().numpy()
        return out

    def frames_to_audio(self, frames: torch.Tensor, use_decoder: bool) -> torch.Tensor:
        """(B, T, H) hidden states or (B, T, num_vq) codes -> (B, 512*T - 256) waveform."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.is_bf16):
            if use_decoder:
                mel = self.decoder.decode(frames.float().transpose(1, 2))  # (B, 100, 2T)
            else:
                mel = self.dvae.decode(frames.long().transpose(1, 2))  # (B, 100, 2T)
            return self.vocos.decode(mel.float()).float()
