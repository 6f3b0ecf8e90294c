"""Turn user text into what ChatTTS reads: words and a few pause marks, each stretch in its language.

ChatTTS reads only words and a few pause marks. This module decides the
language of each stretch of text, maps character widths and punctuation, and
hands digits and symbols to :mod:`turbotts.text.number_words`, which spells
them out in Chinese or English (the official normalizer deletes them).

Mixed text is read per run: a stretch without Chinese characters that holds an
English word is read in English (``"iPhone 15"``), digits next to Chinese
characters in Chinese (``"价格100元"``). Control tokens (``[uv_break]`` ...) are
never touched. Pure ``str -> str``: no torch, no I/O.

Deviations from the official ``Normalizer`` (``norm=1``), on purpose:
  * digits are spelled out instead of deleted;
  * question marks become full stops (the official deletes them, which fuses two
    sentences into one);
  * :func:`detect_language` ignores control tokens (the official counts
    ``[laugh]`` as an English word, so ``"[Stts]你好[laugh]，(hello)"`` is "en");
  * no traditional-to-simplified or homophone replacement (that table is the
    official package's data; use :mod:`turbotts.text.pronounce` instead).
"""

from __future__ import annotations

import re

from turbotts.text.number_words import ZH_UNIT_RE, Lang, normalize_en, normalize_zh, say_digit, say_number
from turbotts.text.sanitize import CONTROL_TOKEN_RE, OFFICIAL_CHAR_MAP, collapse_punctuation, map_plain

__all__ = ["Lang", "detect_language", "normalize", "say_digit", "say_number"]

_CJK_RE = re.compile(r"[\u4e00-\u9fff]")
_CJK_RUN_RE = re.compile(r"([\u4e00-\u9fff]+)")
_EN_WORD_RE = re.compile(r"\b[A-Za-z]+\b")
_LATIN_RE = re.compile(r"[A-Za-z]")

#: The official zh half-width -> full-width map (brackets and ``_`` are left alone).
_HALF_TO_FULL = str.maketrans(
    dict(
        zip("!\"'#$%&(),-*+./:;<=>?@\\^`{|}~", "！“‘＃＄％＆（），－＊＋。／：；＜＝＞？＠＼＾｀｛｜｝～", strict=True)
    )
)
_FULL_WIDTH_ALNUM = str.maketrans(
    {chr(c): chr(c - 0xFEE0) for c in [*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B)]}
    | {"％": "%", "．": ".", "＄": "$", "＋": "+", "＝": "=", "＆": "&"}
)
#: Pause marks ChatTTS was trained without become commas and stops (the official
#: map, applied always rather than only when the charset rejects them) and
#: question marks become stops.
_PAUSES = str.maketrans({**OFFICIAL_CHAR_MAP, "?": ".", "？": "。"})


def detect_language(text: str) -> Lang:
    """Say "zh" when Chinese characters outnumber English words, else "en".

    Like the official rule, except that control tokens are not counted as words.
    """
    plain = CONTROL_TOKEN_RE.sub(" ", text)
    return "zh" if len(_CJK_RE.findall(plain)) > len(_EN_WORD_RE.findall(plain)) else "en"


# ---------------------------------------------------------------- pipeline


def _is_english_run(run: str) -> bool:
    """A run without Chinese characters is English when a Latin letter is left
    after removing number+unit pairs (``"100kg"`` in Chinese reads in Chinese)."""
    return bool(_LATIN_RE.search(ZH_UNIT_RE.sub("", run)))


def _normalize_plain(text: str, lang: Lang) -> str:
    if not _CJK_RE.search(text):
        return normalize_zh(text) if lang == "zh" and not _is_english_run(text) else normalize_en(text)
    runs = _CJK_RUN_RE.split(text)  # odd indices are Chinese runs
    runs = [normalize_en(r) if i % 2 == 0 and _is_english_run(r) else r for i, r in enumerate(runs)]
    return normalize_zh("".join(runs))


def normalize(text: str, lang: Lang | None = None) -> str:
    """Turn text into words ChatTTS can read.

    Full-width letters and digits become ASCII; numbers, dates, times, units,
    percentages, currency and symbols become words in the language of their
    context; for Chinese (like the official) half-width punctuation becomes
    full-width; brackets, colons and dashes become commas and ``!``/``?`` full
    stops (the official character map); runs of punctuation collapse. Control tokens pass through.

    Args:
        text: sanitized user text.
        lang: force "zh" or "en"; ``None`` detects it with :func:`detect_language`.

    Returns:
        The normalized text. Characters the tokenizer cannot represent are left
        for :func:`turbotts.text.sanitize.map_unrepresentable`.
    """
    text = map_plain(text, lambda p: p.translate(_FULL_WIDTH_ALNUM))
    lang = lang or detect_language(text)
    text = map_plain(text, lambda p: _normalize_plain(p, lang))
    if lang == "zh":
        text = map_plain(text, lambda p: p.translate(_HALF_TO_FULL))
    text = map_plain(text, lambda p: p.translate(_PAUSES))
    return collapse_punctuation(re.sub(r" {2,}", " ", text)).strip()
