"""What a caller may ask of one synthesis: sampling, voice, seed.

Defaults equal the official package's ``InferCodeParams`` and
``RefineTextParams``, so a request that sets nothing behaves like the official
``Chat.infer``. User errors raise :class:`~turbotts.errors.InvalidInputError`
(a ``ValueError``) when the object is built, never later inside the engine.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

from turbotts.errors import InvalidInputError

NUM_VQ = 4
MAX_NEW_TOKENS_LIMIT = 4096
#: Longest transcript of a reference clip: its tokens share the prompt with the clip's codes and the text.
MAX_TRANSCRIPT_CHARS = 500


def _check_range(name: str, value: float, low: float, high: float, *, low_open: bool = False) -> None:
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        bracket = "(" if low_open else "["
        raise InvalidInputError(f"{name}={value} is out of range {bracket}{low}, {high}]; pass a value inside it")


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings of one GPT pass (code generation or text refinement).

    ``greedy`` means argmax after the repetition penalty (and the min-new-tokens
    EOS ban), which is what the official sampler converges to at temperature 0.
    The official sampler always keeps at least 3 candidates, so ``top_k=1`` is not
    greedy there and is not here either.
    """

    temperature: float | tuple[float, ...] = 0.3
    top_p: float = 0.7
    top_k: int = 20
    repetition_penalty: float = 1.05
    min_new_tokens: int = 0
    max_new_tokens: int = 2048
    greedy: bool = False
    ignore_eos: bool = False  # benchmarks: run exactly max_new_tokens steps

    def __post_init__(self) -> None:
        temps = self.temperature if isinstance(self.temperature, tuple) else (self.temperature,)
        if isinstance(self.temperature, tuple) and len(temps) not in (1, NUM_VQ):
            raise InvalidInputError(f"temperature takes 1 or {NUM_VQ} values (one per codebook), got {len(temps)}")
        for t in temps:
            _check_range("temperature", t, 0.0, 5.0, low_open=True)
        _check_range("top_p", self.top_p, 0.0, 1.0, low_open=True)
        if not 1 <= self.top_k <= 1000:
            raise InvalidInputError(f"top_k={self.top_k} is out of range [1, 1000]")
        _check_range("repetition_penalty", self.repetition_penalty, 0.0, 10.0, low_open=True)
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS_LIMIT:
            raise InvalidInputError(f"max_new_tokens={self.max_new_tokens} is out of range [1, {MAX_NEW_TOKENS_LIMIT}]")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise InvalidInputError(
                f"min_new_tokens={self.min_new_tokens} must lie in [0, max_new_tokens={self.max_new_tokens}]"
            )

    def temperatures(self, num_columns: int) -> tuple[float, ...]:
        """The temperature of each codebook (or of the single text column)."""
        temps = self.temperature if isinstance(self.temperature, tuple) else (self.temperature,)
        return temps * num_columns if len(temps) == 1 else temps[:num_columns]


def default_refine_params() -> SamplingParams:
    """The official ``RefineTextParams``: hotter, no repetition penalty, 384 tokens."""
    return SamplingParams(temperature=0.7, top_p=0.7, top_k=20, repetition_penalty=1.0, max_new_tokens=384)


def user_sampling(
    *,
    max_new_tokens: int | None = None,
    max_new_tokens_cap: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    repetition_penalty: float | None = None,
    greedy: bool = False,
) -> tuple[SamplingParams, SamplingParams]:
    """``(code, refine)`` params from what a user set (CLI flags, request fields); the one place they are built.

    Unset fields keep the official defaults; ``max_new_tokens_cap`` (a server's limit) bounds both passes;
    ``greedy`` applies to both. Raises InvalidInputError on out-of-range values.
    """
    fields: dict[str, Any] = {
        "temperature": temperature, "top_p": top_p, "top_k": top_k, "repetition_penalty": repetition_penalty,
    }  # fmt: skip
    code = replace(SamplingParams(greedy=greedy), **{k: v for k, v in fields.items() if v is not None})
    refine = replace(default_refine_params(), greedy=greedy)
    cap = max_new_tokens_cap
    if max_new_tokens is not None or cap is not None:
        wanted = max_new_tokens or cap or code.max_new_tokens
        code = replace(code, max_new_tokens=min(wanted, cap) if cap else wanted)
    if cap is not None:
        refine = replace(refine, max_new_tokens=min(refine.max_new_tokens, cap))
    return code, refine


@dataclass(frozen=True)
class VoiceReference:
    """A zero-shot voice: the audio codes of a reference clip and what the clip says.

    The GPT continues the clip: the official prompt is ``[Stts]`` + speaker slot +
    ``transcript`` + speed + text + ``[Ptts]`` followed by the clip's codes, so it speaks
    the new text in the clip's voice. The fields are the official ``spk_smp`` and
    ``txt_smp`` of ``InferCodeParams``.

    Args:
        spk_smp: the official audio-prompt string (``Chat.sample_audio_speaker`` of a clip;
            :func:`turbotts.model.reference.encode_reference` makes it).
        transcript: the words spoken in the clip (``txt_smp``).

    Raises:
        InvalidInputError: empty prompt or transcript, or a transcript over ``MAX_TRANSCRIPT_CHARS``.
    """

    spk_smp: str
    transcript: str

    def __post_init__(self) -> None:
        if not self.spk_smp.strip():
            raise InvalidInputError("the reference's spk_smp string is empty; encode a clip first")
        if not self.transcript.strip():
            raise InvalidInputError("a reference clip needs its transcript (the words spoken in it)")
        if len(self.transcript) > MAX_TRANSCRIPT_CHARS:
            raise InvalidInputError(
                f"the transcript is {len(self.transcript)} characters; at most {MAX_TRANSCRIPT_CHARS} are "
                "allowed (use a shorter clip and its words)"
            )

    @property
    def digest(self) -> str:
        """SHA-256 of both fields: what logs and cache keys carry instead of the clip's codes."""
        return hashlib.sha256(f"{self.spk_smp}\x00{self.transcript}".encode()).hexdigest()


@dataclass(frozen=True)
class SynthesisParams:
    """One synthesis request's knobs.

    Args:
        voice: an official voice string (base16384 speaker embedding); None = no speaker
            embedding (``[empty_spk]``), unless ``voice_seed`` picks a random voice.
        voice_seed: sample a voice from the checkpoint's speaker statistics with this seed.
        reference: a zero-shot voice from a reference clip (audio codes + transcript); it may
            be combined with ``voice`` (both go into the prompt, as in the official package).
        seed: seeds the sampler; the same seed and inputs give the same codes whatever
            else shares the batch. None = a fresh random seed.
        prompt: the code prompt, ``[speed_5]`` by default (speed 0..9).
        refine_text: run the refine-text stage first (adds oral/laugh/break tokens).
        normalize_text: run the text front end (numbers, symbols) before tokenizing.
        use_decoder: mel from GPT hidden states (the Decoder, as the official default)
            rather than from codes (the DVAE).
    """

    code: SamplingParams = field(default_factory=SamplingParams)
    refine: SamplingParams = field(default_factory=default_refine_params)
    voice: str | None = None
    voice_seed: int | None = None
    reference: VoiceReference | None = None
    seed: int | None = None
    prompt: str = "[speed_5]"
    refine_prompt: str = ""  # e.g. "[oral_2][laugh_0][break_6]"
    refine_text: bool = True
    normalize_text: bool = True
    use_decoder: bool = True

    def __post_init__(self) -> None:
        if self.voice is not None and self.voice_seed is not None:
            raise InvalidInputError("pass either voice or voice_seed, not both")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise InvalidInputError(f"seed={self.seed} must be a non-negative 63-bit integer")
        if self.voice_seed is not None and not 0 <= self.voice_seed < 2**63:
            raise InvalidInputError(f"voice_seed={self.voice_seed} must be a non-negative 63-bit integer")
