"""The runner's voices: speaker strings decoded once and put into a prefill's embeddings.

Decoding a voice string (LZMA) and drawing a seed voice (LZMA at its slowest preset to encode it) are
slow next to a step and would otherwise be paid again on the engine thread by every request naming
the same voice, so both are kept in small LRU caches.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from turbotts.engine.batch import PrefillItem
from turbotts.model.speaker import SpeakerStats, apply_speaker, decode_voice, encode_voice, sample_random_voice

VOICE_CACHE_SIZE = 256


class RunnerVoices:
    """Voice strings by seed and voice vectors by string, each an LRU of ``VOICE_CACHE_SIZE`` entries."""

    def __init__(self, speaker_stats: SpeakerStats, hidden_size: int, spk_emb_id: int) -> None:
        self.speaker_stats = speaker_stats
        self.hidden_size = hidden_size
        self.spk_emb_id = spk_emb_id
        self._vectors: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._random_voices: OrderedDict[int, str] = OrderedDict()

    def random_voice(self, seed: int) -> str:
        """The official string of the voice ``seed`` draws from the speaker statistics, cached by seed.

        Cached because encoding is LZMA at its slowest preset, paid on the engine thread by every
        request naming a built-in voice (``alloy`` is a seed).
        """
        if seed in self._random_voices:
            self._random_voices.move_to_end(seed)
            return self._random_voices[seed]
        voice = encode_voice(sample_random_voice(self.speaker_stats, seed))
        self._random_voices[seed] = voice
        if len(self._random_voices) > VOICE_CACHE_SIZE:
            self._random_voices.popitem(last=False)
        return voice

    def vector(self, voice: str) -> torch.Tensor:
        """Decoded (H,) float16 voice, cached by string."""
        if voice in self._vectors:
            self._vectors.move_to_end(voice)
            return self._vectors[voice]
        vector = decode_voice(voice, self.hidden_size)
        self._vectors[voice] = vector
        if len(self._vectors) > VOICE_CACHE_SIZE:
            self._vectors.popitem(last=False)
        return vector

    def apply(self, emb: torch.Tensor, ids: torch.Tensor, items: list[PrefillItem]) -> torch.Tensor:
        """``emb`` (B, L, H) with each voiced row's ``[spk_emb]`` position replaced by its voice."""
        voiced = [row for row, item in enumerate(items) if item.voice is not None]
        if not voiced:
            return emb
        voices = torch.zeros(len(items), emb.shape[-1], dtype=torch.float16)  # (B, H)
        for row in voiced:
            voices[row] = self.vector(items[row].voice or "")
        return apply_speaker(emb, ids, self.spk_emb_id, voices)
