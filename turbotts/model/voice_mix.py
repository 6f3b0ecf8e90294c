"""Voice mixing: ``"alloy+nova"`` or ``"alloy*0.7+nova*0.3"`` (Kokoro's convention) -> one speaker vector.

A ChatTTS voice is one float16 vector that replaces the ``[spk_emb]`` embedding after
L2 normalization, so a voice is a *direction* in the GPT's input space. A mix is the
weighted mean of its parts' vectors (weights normalized to sum to 1), computed in
float32 and stored as float16 like any voice. Because the model normalizes it, only
the direction matters: a mix of two voices lies on the arc between them, and equal
weights give the middle. Random voices are ``mean + std * z``, so averaging pulls a
mix toward the statistics' mean voice (a more "average" speaker); this is an
interpolation in the trained embedding space, not an audio crossfade, and it is
only as meaningful as that space is smooth.

Reference-clip voices cannot be mixed: they are audio codes in the prompt, not a
speaker vector (:class:`~turbotts.errors.VoiceMixError`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from turbotts.errors import VoiceMixError

MAX_MIX_PARTS = 8
_PART_RE = re.compile(r"^\s*([^*+\s]+)\s*(?:\*\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*)?$")


@dataclass(frozen=True)
class MixPart:
    """One voice of a mix and its share (the shares of a mix sum to 1)."""

    name: str
    weight: float


def is_voice_mix(text: str) -> bool:
    """Whether ``text`` is a mix expression (voice names and voice strings never hold ``+`` or ``*``)."""
    return "+" in text or "*" in text


def parse_voice_mix(text: str) -> list[MixPart]:
    """The parts of a mix, weights normalized to sum to 1 (``a+b`` is ``a*0.5+b*0.5``).

    Raises:
        VoiceMixError: an empty part, a weight that is not a positive number, or more than ``MAX_MIX_PARTS`` parts.
    """
    pieces = text.split("+")
    if len(pieces) > MAX_MIX_PARTS:
        raise VoiceMixError(f"a voice mix takes at most {MAX_MIX_PARTS} voices, got {len(pieces)}")
    parts: list[tuple[str, float]] = []
    for piece in pieces:
        match = _PART_RE.match(piece)
        if match is None:
            raise VoiceMixError(
                f"cannot read the voice mix part {piece[:80]!r}; write name or name*weight joined by '+', "
                "like alloy*0.7+nova*0.3"
            )
        weight = float(match.group(2)) if match.group(2) is not None else 1.0
        if not math.isfinite(weight) or weight <= 0:
            raise VoiceMixError(f"the weight of {match.group(1)!r} must be a positive number, got {weight}")
        parts.append((match.group(1), weight))
    total = sum(weight for _, weight in parts)
    return [MixPart(name, weight / total) for name, weight in parts]


def mix_voices(vectors: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    """The float16 (H,) weighted mean of float16 (H,) voice vectors (``weights`` sum to 1).

    Raises:
        VoiceMixError: no vectors, a count mismatch, or vectors of different widths.
    """
    if not vectors or len(vectors) != len(weights):
        raise VoiceMixError(f"a mix needs one weight per voice, got {len(vectors)} voices and {len(weights)} weights")
    if len({v.numel() for v in vectors}) != 1:
        raise VoiceMixError("the voices of a mix have different widths; they were made for different models")
    stacked = torch.stack([v.reshape(-1).float() for v in vectors])  # (N, H)
    shares = torch.tensor(weights, dtype=torch.float32).unsqueeze(1)  # (N, 1)
    return (stacked * shares).sum(0).to(torch.float16)  # (H,)
