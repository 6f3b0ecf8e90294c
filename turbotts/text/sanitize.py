"""Clean user text before it reaches the normalizer and the tokenizer.

Two jobs live here because both decide which characters survive:

* :func:`sanitize` removes what never belongs in speech: markup tags, emoji,
  control and zero-width characters, and runs of punctuation or whitespace.
* :func:`map_unrepresentable` maps or drops the characters the tokenizer cannot
  represent, so the model never sees ``[UNK]`` and the request never crashes.

The ChatTTS control tokens (``[uv_break]``, ``[laugh_0]``, ``[speed_5]``, ...)
are recognised by :data:`CONTROL_TOKEN_RE` and always pass through intact; the
other text modules import the same pattern so that every step agrees on them.
Pure ``str -> str``: no torch, no I/O.
"""

from __future__ import annotations

import html
import logging
import re
import unicodedata
from collections.abc import Callable, Collection, Iterable, Mapping

from turbotts.redaction import describe_text

logger = logging.getLogger(__name__)

#: The control tokens of the official vocabulary (prosody and prompt structure).
#: Only these names are protected; ``[note]`` or ``[1]`` are ordinary text.
CONTROL_TOKEN_RE = re.compile(
    r"\[(?:uv_break|v_break|lbreak|laugh|(?:oral|laugh|break|speed)_\d+"
    r"|Stts|Ptts|spk_emb|empty_spk|Sbreak|Pbreak|Ebreak)\]"
)

#: The official "invalid character" map: ChatTTS reads commas and full stops,
#: so other pause marks become one of those. Applied only to characters the
#: tokenizer charset rejects (in the official charset, every key is rejected).
OFFICIAL_CHAR_MAP: Mapping[str, str] = {
    **dict.fromkeys("：；（）【】『』「」《》－", "，"),
    "！": "。",
    **dict.fromkeys(":;()<>-", ","),
    "!": ".",
}

_OFFICIAL_PUNCT = frozenset("，。、,. ")

_TAG_RE = re.compile(r"<!--.*?-->|</?[A-Za-z][\w:.-]*(?:\s[^<>]*)?/?>", re.DOTALL)
_EMOJI_RE = re.compile(
    "[\U0001f000-\U0001faff\U0001f1e6-\U0001f1ff\u2600-\u27bf\u2b00-\u2bff"
    "\ufe0e\ufe0f\u200d\u20e3\U000e0020-\U000e007f]"
)
_WS_RE = re.compile(r"\s+")
_PUNCT_CLASS = r"[.,!?;:，。！？；：、…]"
_PUNCT_RUN_RE = re.compile(rf"({_PUNCT_CLASS})(?:\s*{_PUNCT_CLASS})+")
_SPACE_BEFORE_PUNCT_RE = re.compile(r"\s+([.,!?;:，。！？；：、])")


def split_control_tokens(text: str) -> list[tuple[str, bool]]:
    """Split ``text`` into ``(piece, is_control_token)`` pairs, in order.

    Every step that rewrites characters works on the plain pieces only, which is
    how control tokens stay intact through the whole pipeline.
    """
    parts: list[tuple[str, bool]] = []
    pos = 0
    for m in CONTROL_TOKEN_RE.finditer(text):
        if m.start() > pos:
            parts.append((text[pos : m.start()], False))
        parts.append((m.group(0), True))
        pos = m.end()
    if pos < len(text):
        parts.append((text[pos:], False))
    return parts


def map_plain(text: str, fn: Callable[[str], str]) -> str:
    """Apply ``fn`` to the text between control tokens, keeping the tokens."""
    return "".join(piece if is_token else fn(piece) for piece, is_token in split_control_tokens(text))


def is_official_char(ch: str) -> bool:
    """The official normalizer's charset: CJK ideographs, ASCII letters, ``，。、,.`` and space.

    Digits are *not* in it: the official pipeline expects a normalizer to have
    spelled them out and deletes any that remain.
    """
    return "\u4e00" <= ch <= "\u9fff" or ("a" <= ch <= "z") or ("A" <= ch <= "Z") or ch in _OFFICIAL_PUNCT


def charset_from_vocab(tokens: Iterable[str]) -> frozenset[str]:
    """The single characters a WordPiece vocabulary can represent.

    A character is representable when it is a token on its own or as a ``##``
    continuation; the space is always representable (the pre-tokenizer splits on it).
    """
    chars = {" "}
    for tok in tokens:
        piece = tok[2:] if tok.startswith("##") else tok
        if len(piece) == 1:
            chars.add(piece)
    return frozenset(chars)


def map_unrepresentable(
    text: str,
    is_representable: Callable[[str], bool] | Collection[str] = is_official_char,
    char_map: Mapping[str, str] = OFFICIAL_CHAR_MAP,
) -> str:
    """Map or drop every character outside the representable set.

    A rejected character is replaced by ``char_map[ch]`` when that replacement is
    representable, otherwise dropped; one warning per call says how many
    characters were dropped and gives a digest of them, never the characters
    (they are pieces of the user's text). Control tokens are never touched.

    With the defaults this reproduces the official ``norm=0`` path (character
    map, then removal of everything outside the official charset). Deviation:
    a rejected whitespace character (``\\n``, ``\\t``) becomes a space instead of
    vanishing, so two lines do not fuse into one word.

    Args:
        text: text to clean.
        is_representable: a predicate, or a set of characters such as
            :func:`charset_from_vocab` of the tokenizer vocabulary.
        char_map: replacements tried before dropping a character.

    Returns:
        The text with only representable characters and control tokens.
    """
    accept = is_representable.__contains__ if isinstance(is_representable, Collection) else is_representable
    dropped: list[str] = []

    def fix(piece: str) -> str:
        out: list[str] = []
        for ch in piece:
            if accept(ch):
                out.append(ch)
                continue
            repl = char_map.get(ch)
            if repl is None and ch.isspace():
                repl = " "
            if repl is not None and all(accept(c) for c in repl):
                out.append(repl)
            else:
                dropped.append(ch)
        return "".join(out)

    result = map_plain(text, fix)
    if dropped:
        logger.warning(
            "dropped %d characters the tokenizer cannot represent (%d distinct, %s)",
            len(dropped), len(set(dropped)), describe_text("".join(sorted(set(dropped)))),
        )  # fmt: skip
    return result


def _strip_invisible(piece: str) -> str:
    out: list[str] = []
    for ch in piece:
        cat = unicodedata.category(ch)
        if ch in "\t\n\r\f\v":
            out.append(" ")
        elif cat in ("Cc", "Cf", "Cs", "Co", "Cn"):
            continue
        else:
            out.append(ch)
    return "".join(out)


def collapse_punctuation(text: str) -> str:
    """Collapse runs like ``!!!``, ``。。`` or ``?!`` to their first mark and drop
    spaces before a mark, outside control tokens. Runs only add silence or make
    the model babble; the first mark carries the intended pause."""

    def fix(piece: str) -> str:
        piece = _SPACE_BEFORE_PUNCT_RE.sub(r"\1", piece)
        return _PUNCT_RUN_RE.sub(r"\1", piece)

    return map_plain(text, fix)


def sanitize(text: str) -> str:
    """Remove markup, emoji, invisible characters and redundant punctuation.

    Markup tags (``<b>``, ``<speak>``, comments) are removed and HTML entities
    decoded; emoji (with their joiners and variation selectors), control,
    format and zero-width characters are removed; tabs and newlines become
    spaces; whitespace runs become one space; punctuation runs collapse.

    Returns:
        The cleaned text, stripped. It may be empty: the caller decides whether
        that is an error (an empty request) or not.
    """
    text = _TAG_RE.sub(" ", text)
    text = html.unescape(text)
    text = _EMOJI_RE.sub("", text)
    text = _strip_invisible(text)
    text = _WS_RE.sub(" ", text)
    text = collapse_punctuation(text)
    return text.strip()
