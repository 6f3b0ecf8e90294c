"""The GPT passes of one request, as the official builds their prompts.

A request runs a refine pass first when asked (text head), then its code pass; each gets
the next sequence id. The engine core calls these; only the scheduler changes their status.
"""

from __future__ import annotations

from turbotts.engine.sequence import Sequence, SequenceKind
from turbotts.model.tokenizer import Tokenizer, decorate_code_prompt, decorate_refine_prompt
from turbotts.params import SynthesisParams


class SequenceBuilder:
    """Prompt text -> :class:`Sequence`, with ids unique within one engine."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._last_seq_id = 0

    def _new(
        self, kind: SequenceKind, prompt: str, params: SynthesisParams, seed: int, voice: str | None = None,
        prompt_codes: list[list[int]] | None = None,
    ) -> Sequence:  # fmt: skip
        self._last_seq_id += 1
        sampling = params.refine if kind is SequenceKind.TEXT else params.code
        return Sequence(
            self._last_seq_id,
            kind,
            self._tokenizer.encode(prompt),
            sampling,
            seed,
            voice if kind is SequenceKind.CODE else None,
            prompt_codes=prompt_codes or [],
        )

    def first(
        self, text: str, params: SynthesisParams, seed: int, voice: str | None, prompt_codes: list[list[int]]
    ) -> Sequence:
        if params.refine_text:
            refine_prompt = decorate_refine_prompt(text, params.refine_prompt)
            return self._new(SequenceKind.TEXT, refine_prompt, params, seed)
        return self.code(text, params, seed, voice, prompt_codes)

    def code(
        self, text: str, params: SynthesisParams, seed: int, voice: str | None, prompt_codes: list[list[int]]
    ) -> Sequence:
        """The official code prompt: speaker slot, the reference's transcript, speed, text; then its codes."""
        txt_smp = params.reference.transcript if params.reference is not None else None
        prompt = decorate_code_prompt(text, params.prompt, txt_smp, has_speaker=voice is not None)
        return self._new(SequenceKind.CODE, prompt, params, seed, voice, prompt_codes)
