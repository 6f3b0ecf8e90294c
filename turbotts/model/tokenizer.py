"""Text <-> token ids for the ChatTTS GPT, on the ``tokenizers`` library.

The official package wraps ``transformers.BertTokenizerFast``; the same
``tokenizer.json`` loaded with ``tokenizers`` gives the same ids as long as no
special tokens are added (its post-processor would add ``[CLS]``/``[SEP]``,
which ChatTTS never sees). Prompt decoration and batching follow the official
package exactly, because the GPT was trained on exactly those layouts:

* code prompt:   ``[Stts]`` + ``[spk_emb]``|``[empty_spk]`` + txt_smp + prompt + text + ``[Ptts]``
* refine prompt: ``[Sbreak]`` + text + ``[Pbreak]`` + prompt
* batches are LEFT-padded with id 0 and ids are repeated over the ``num_vq``
  code streams; an audio prompt's codes follow ``[Ptts]`` with ``text_mask`` False.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer as HFTokenizer

from turbotts.errors import CheckpointError, InvalidInputError
from turbotts.redaction import describe_text

logger = logging.getLogger(__name__)

#: Removed from user text before decoration (official behaviour, 2noise/ChatTTS#459):
#: a user must not be able to forge the prompt structure.
_STRUCTURE_TOKENS = ("[Stts]", "[spk_emb]", "[empty_spk]")


def decorate_code_prompt(
    text: str, prompt: str = "[speed_5]", txt_smp: str | None = None, has_speaker: bool = False
) -> str:
    """The prompt of the code (audio) pass, exactly as the official package builds it.

    Args:
        text: normalized text; ``[Stts]``, ``[spk_emb]`` and ``[empty_spk]`` are removed and it is stripped.
        prompt: control tokens placed before the text (speed and the like).
        txt_smp: the transcript of an audio prompt (zero-shot voice), if any.
        has_speaker: whether a speaker embedding fills the ``[spk_emb]`` slot.
    """
    for token in _STRUCTURE_TOKENS:
        text = text.replace(token, "")
    speaker = "[spk_emb]" if has_speaker else "[empty_spk]"
    return f"[Stts]{speaker}{txt_smp or ''}{prompt}{text.strip()}[Ptts]"


def decorate_refine_prompt(text: str, prompt: str = "") -> str:
    """The prompt of the text-refinement pass (``prompt`` like ``[oral_2][laugh_0][break_6]``)."""
    return f"[Sbreak]{text}[Pbreak]{prompt}"


@dataclass(frozen=True)
class EncodedBatch:
    """A left-padded batch ready for the embedding layer."""

    input_ids: torch.Tensor  # (B, L, num_vq) int64
    attention_mask: torch.Tensor  # (B, L) int64, 0 on left padding
    text_mask: torch.Tensor  # (B, L) bool, True on text tokens


class Tokenizer:
    """ChatTTS tokenizer with the special ids the engine needs.

    Raises (at construction):
        CheckpointError: the file is missing or malformed, a special token is
            missing, or the vocabulary has ids the GPT's text embedding cannot hold.
    """

    def __init__(self, tokenizer: HFTokenizer, num_text_tokens: int | None = None) -> None:
        self._tok = tokenizer
        self.vocab: dict[str, int] = tokenizer.get_vocab(with_added_tokens=True)
        self.vocab_size = max(self.vocab.values()) + 1
        self.num_text_tokens = num_text_tokens if num_text_tokens is not None else self.vocab_size
        if self.vocab_size > self.num_text_tokens:
            raise CheckpointError(
                f"the tokenizer has ids up to {self.vocab_size - 1} but the GPT has only "
                f"{self.num_text_tokens} text embeddings; the tokenizer does not belong to this checkpoint"
            )
        self.pad_id = 0
        self.unk_id = self.vocab.get("[UNK]")
        self.stts_id = self.token_id("[Stts]")
        self.ptts_id = self.token_id("[Ptts]")
        self.spk_emb_id = self.token_id("[spk_emb]")
        self.empty_spk_id = self.token_id("[empty_spk]")
        self.sbreak_id = self.token_id("[Sbreak]")
        self.pbreak_id = self.token_id("[Pbreak]")
        self.eos_id = self.token_id("[Ebreak]")  # text EOS of the refine pass
        self.break_0_id = self.token_id("[break_0]")  # refine output ids >= this are control tokens

    @classmethod
    def from_file(cls, path: str | Path, num_text_tokens: int | None = None) -> Tokenizer:
        """Load ``tokenizer.json`` (or a directory holding it, like ``asset/tokenizer``)."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        try:
            tokenizer = HFTokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for missing or bad files
            raise CheckpointError(
                f"cannot load the tokenizer from {path}: {exc}; check the asset/tokenizer folder"
            ) from exc
        return cls(tokenizer, num_text_tokens)

    @classmethod
    def from_json(cls, text: str, num_text_tokens: int | None = None) -> Tokenizer:
        """Build from the text of a ``tokenizer.json`` (generated checkpoints)."""
        try:
            tokenizer = HFTokenizer.from_str(text)
        except Exception as exc:  # tokenizers raises a bare Exception for malformed JSON
            raise CheckpointError(f"cannot parse the tokenizer JSON: {exc}") from exc
        return cls(tokenizer, num_text_tokens)

    def token_id(self, token: str) -> int:
        """The id of one vocabulary token.

        Raises:
            CheckpointError: the token is not in the vocabulary.
        """
        token_id = self.vocab.get(token)
        if token_id is None:
            raise CheckpointError(f"the tokenizer has no {token} token; it is not a ChatTTS tokenizer")
        return token_id

    def encode(self, text: str) -> list[int]:
        """Ids of one (already decorated) text, without padding or added specials.

        Raises:
            InvalidInputError: the text gives no tokens.
            CheckpointError: an id does not fit the GPT's text embedding.
        """
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if not ids:
            raise InvalidInputError(f"the text ({len(text)} characters) has no tokens; send text with words in it")
        bad = [i for i in ids if not 0 <= i < self.num_text_tokens]
        if bad:
            raise CheckpointError(f"token ids {bad} are outside the {self.num_text_tokens} text embeddings")
        if self.unk_id is not None and self.unk_id in ids:
            logger.warning(
                "text %s has %d [UNK] tokens (characters the vocabulary lacks, or a word over its length limit); "
                "map them before encoding",
                describe_text(text), ids.count(self.unk_id),
            )  # fmt: skip
        return ids

    def encode_unpadded(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text, unpadded (what the continuous-batching engine uses)."""
        return [self.encode(t) for t in texts]

    def encode_batch(self, texts: Sequence[str], num_vq: int, audio_prompt: torch.Tensor | None = None) -> EncodedBatch:
        """A left-padded batch, like the official ``Tokenizer.encode``.

        Args:
            texts: decorated prompts.
            num_vq: number of code streams; text ids are repeated over them.
            audio_prompt: optional (num_vq, P) integer codes appended after every
                text (zero-shot voice); their positions have ``text_mask`` False.

        Raises:
            InvalidInputError: no texts, or an audio prompt of the wrong shape.
        """
        if not texts:
            raise InvalidInputError("encode_batch needs at least one text")
        num_prompt = 0
        if audio_prompt is not None:
            if audio_prompt.dim() != 2 or audio_prompt.size(0) != num_vq:
                raise InvalidInputError(
                    f"audio prompt must be (num_vq={num_vq}, P) codes, got {tuple(audio_prompt.shape)}"
                )
            num_prompt = audio_prompt.size(1)
        ids = self.encode_unpadded(texts)
        batch, length = len(ids), max(len(x) for x in ids) + num_prompt
        input_ids = torch.zeros(batch, length, num_vq, dtype=torch.int64)  # (B, L, num_vq)
        attention_mask = torch.zeros(batch, length, dtype=torch.int64)  # (B, L)
        text_mask = torch.zeros(batch, length, dtype=torch.bool)  # (B, L)
        text_end = length - num_prompt
        for row, row_ids in enumerate(ids):
            start = text_end - len(row_ids)
            input_ids[row, start:text_end] = torch.tensor(row_ids, dtype=torch.int64).unsqueeze(-1)
            attention_mask[row, start:] = 1
            text_mask[row, start:text_end] = True
        if audio_prompt is not None:
            input_ids[:, text_end:] = audio_prompt.to(torch.int64).t().unsqueeze(0)  # (1, P, num_vq)
        return EncodedBatch(input_ids, attention_mask, text_mask)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of one id sequence, special tokens kept (like the official ``decode``)."""
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def decode_batch(self, sequences: Sequence[Sequence[int]]) -> list[str]:
        return [self.decode(s) for s in sequences]

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """The token strings of ``ids`` (``[UNK]`` for unknown ids)."""
        return [self._tok.id_to_token(i) or "[UNK]" for i in ids]

    def vocab_tokens(self) -> list[str]:
        """All vocabulary tokens, for :func:`turbotts.text.sanitize.charset_from_vocab`."""
        return list(self.vocab)
