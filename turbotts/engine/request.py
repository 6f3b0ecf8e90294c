"""What the engine core tracks per synthesis request, and what it hands back."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from turbotts.engine.sequence import Sequence, SequenceStatus
from turbotts.engine.streaming import AudioStream
from turbotts.params import SynthesisParams


@dataclass(eq=False)
class EngineRequest:
    """One utterance: prepared text, resolved voice and seed, its sequences and audio.

    Attributes:
        text: the text after the front end (what the prompt says).
        seed: the sampler seed actually used (drawn when the caller gave none).
        voice: the voice string actually used (drawn from ``voice_seed`` if asked).
        prompt_codes: the reference clip's codes (P, num_vq) after the prompt text, or empty.
        sequence: the GPT pass running now (refine first, then codes).
    """

    request_id: str
    text: str
    params: SynthesisParams
    seed: int
    voice: str | None
    prompt_codes: list[list[int]]
    audio: AudioStream
    sequence: Sequence
    keep_hidden: bool = False
    is_realtime: bool = False  # under real-time admission (a stream someone listens to as it comes)
    arrival_s: float = field(default_factory=time.perf_counter)
    first_audio_s: float | None = None
    refined_text: str | None = None


@dataclass(frozen=True)
class RequestOutput:
    """A piece of one request's result.

    ``audio`` holds the new samples only (float32, 24 kHz, possibly empty). The
    last output of a request has ``is_finished`` set and carries its codes (and
    hidden states when asked for).
    """

    request_id: str
    audio: np.ndarray
    is_finished: bool
    finish_reason: str | None = None
    codes: list[list[int]] | None = None
    hidden: object = None
    ttfa_s: float | None = None
    num_frames: int = 0
    refined_text: str | None = None


FINISH_REASONS = {
    SequenceStatus.FINISHED_STOPPED: "stop",
    SequenceStatus.FINISHED_LENGTH: "length",
    SequenceStatus.FINISHED_ABORTED: "aborted",
}
