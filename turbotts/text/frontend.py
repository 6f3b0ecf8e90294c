"""The text path in front of the tokenizer, in its fixed order.

1. the user's pronunciation dictionary (polyphones), so it sees the raw words;
2. normalization (numbers, dates, symbols -> words) when asked for;
3. mapping or dropping characters outside both the official charset and the
   tokenizer's vocabulary, so no id can fall outside the embedding table.

Pure ``str -> str``: the charset is handed in, nothing is read from disk.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from turbotts.text.normalize import normalize
from turbotts.text.pronounce import PronunciationDict
from turbotts.text.sanitize import is_official_char, map_unrepresentable


@dataclass(frozen=True)
class TextFrontend:
    """Turns user text into what the code prompt should say.

    Args:
        vocab_chars: single characters the tokenizer can represent.
        pronunciations: user replacements applied first (may be empty).
    """

    vocab_chars: Collection[str]
    pronunciations: PronunciationDict | None = None

    def is_representable(self, ch: str) -> bool:
        return is_official_char(ch) and ch in self.vocab_chars

    def prepare(self, text: str, *, normalize_text: bool = True) -> str:
        if self.pronunciations is not None and len(self.pronunciations):
            text = self.pronunciations.apply(text)
        if normalize_text:
            text = normalize(text)
        return map_unrepresentable(text, self.is_representable).strip()
