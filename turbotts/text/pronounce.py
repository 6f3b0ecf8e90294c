"""A user pronunciation dictionary for Chinese polyphones.

ChatTTS reads each character with the pronunciation it saw most in training, so
行 in 银行 (háng) comes out as xíng and 重 in 重新 (chóng) as zhòng. The fix
that works without retraining is to write a homophone the model reads right:
银行 -> 银杭, 重新 -> 虫新. Entries are whole words, so the replacement only
happens in the context the user listed.

Matching is longest first (``{"行": ..., "银行": ...}`` applies 银行 inside
银行卡) and never touches control tokens. The CLI and the server read JSON/YAML
files into a plain dict and pass it to :meth:`PronunciationDict.from_dict`.
Pure ``str -> str``: no torch, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from turbotts.errors import InvalidInputError
from turbotts.text.sanitize import CONTROL_TOKEN_RE, map_plain

#: A small starter set for the polyphones ChatTTS most often misreads. Opt-in:
#: pass it (or a dict merged with it) to :meth:`PronunciationDict.from_dict`.
COMMON_POLYPHONES: Mapping[str, str] = {
    "银行": "银杭",
    "行业": "杭业",
    "行长": "杭长",
    "行情": "杭情",
    "重新": "虫新",
    "重复": "虫复",
    "重庆": "虫庆",
    "重阳": "虫阳",
    "和面": "活面",
    "暖和": "暖活",
    "和牌": "胡牌",
}


@dataclass(frozen=True)
class PronunciationDict:
    """Word -> replacement entries applied before tokenization.

    Build it with :meth:`from_dict`, which validates the entries; an empty
    dictionary is valid and leaves text unchanged.
    """

    entries: Mapping[str, str] = field(default_factory=dict)
    _pattern: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.entries:
            # Longest keys first: the regex alternation takes the first that matches.
            keys = sorted(self.entries, key=len, reverse=True)
            object.__setattr__(self, "_pattern", re.compile("|".join(re.escape(k) for k in keys)))

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> PronunciationDict:
        """Validate and build a dictionary from parsed JSON/YAML.

        Raises:
            InvalidInputError: a key or value is not a string, a key is empty,
                or an entry contains a control token (which must not be rewritten).
        """
        entries: dict[str, str] = {}
        for key, value in mapping.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidInputError(
                    f"pronunciation entry {key!r}: {value!r} must map a string to a string; fix the dictionary file"
                )
            if not key.strip():
                raise InvalidInputError("pronunciation dictionary has an empty word; remove that entry")
            if CONTROL_TOKEN_RE.search(key) or CONTROL_TOKEN_RE.search(value):
                raise InvalidInputError(f"pronunciation entry {key!r} contains a control token; remove it")
            entries[key] = value
        return cls(entries)

    def merged(self, other: Mapping[str, str]) -> PronunciationDict:
        """A new dictionary with ``other``'s entries added (they win on conflicts),
        e.g. a request's own entries over the server's defaults."""
        return PronunciationDict.from_dict({**self.entries, **other})

    def apply(self, text: str) -> str:
        """Replace every listed word, longest match first, outside control tokens."""
        pattern = self._pattern
        if pattern is None:
            return text
        entries = self.entries
        return map_plain(text, lambda piece: pattern.sub(lambda m: entries[m.group(0)], piece))

    def __len__(self) -> int:
        return len(self.entries)
