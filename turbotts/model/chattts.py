"""All ChatTTS modules of one checkpoint, built from its config.

This is a container with no behaviour of its own: the runners decide how the
modules are driven, batched and placed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from turbotts.config import ModelConfig
from turbotts.model.decoder import HiddenDecoder
from turbotts.model.dvae import DVAE
from turbotts.model.embed import Embed
from turbotts.model.gpt import GPT
from turbotts.model.speaker import SpeakerStats
from turbotts.model.tokenizer import Tokenizer
from turbotts.model.vocos import Vocos


class ChatTTSModules(nn.Module):
    """GPT + embeddings/heads + the two mel decoders + the vocoder."""

    def __init__(self, config: ModelConfig, *, defer_gpt_weights: bool = False) -> None:
        """``defer_gpt_weights`` builds the GPT and its embeddings/heads (95% of the
        weights) on the meta device, for a loader that assigns the checkpoint's tensors
        to them: no random initialisation to throw away and no second copy of every
        weight while loading, which was the largest part of the process's peak memory.
        """
        super().__init__()
        self.config = config
        with torch.device("meta" if defer_gpt_weights else "cpu"):
            self.gpt = GPT(config.gpt)
            self.embed = Embed(config.gpt)
        self.decoder = HiddenDecoder(config.decoder)
        self.dvae = DVAE(config.dvae)
        self.vocos = Vocos(config.vocos)


@dataclass
class ChatTTSModel:
    """A loaded checkpoint: modules, tokenizer, speaker statistics and identity.

    Attributes:
        fingerprint: identifies the weights (for cache keys and logs).
        is_dummy: random weights; their audio is noise.
    """

    config: ModelConfig
    modules: ChatTTSModules
    tokenizer: Tokenizer
    speaker_stats: SpeakerStats
    fingerprint: str
    is_dummy: bool
    device: torch.device
    dtype: torch.dtype

    @property
    def sample_rate_hz(self) -> int:
        return self.config.sample_rate_hz
