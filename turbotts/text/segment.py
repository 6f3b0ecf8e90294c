"""Cut long text into segments the model can synthesize one at a time.

ChatTTS degrades on long prompts (it skips or repeats words), so long requests
are cut at sentence boundaries first, then at clause boundaries, then at
whitespace, and only as a last resort between characters. Neighbouring
sentences are packed into one segment while they fit, so a long request becomes
few, evenly sized segments rather than many tiny ones.

Lengths are counted in *units*: a character, or a whole control token such as
``[uv_break]`` (one token for the model). A control token is never split, and
one that follows a sentence end stays with that sentence.

Request text goes through :func:`turbotts.text.segmenter.split_input` (which cleans it,
reads SSML and calls :func:`split_text`); :class:`SentenceBuffer` cuts text that arrives in
pieces. Pure ``str -> str``: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from turbotts.text.sanitize import split_control_tokens

#: The longest segment, in characters, unless the server's ``max_segment_chars`` says otherwise:
#: ChatTTS speaks about this much well in one prompt.
DEFAULT_MAX_SEGMENT_CHARS = 120

_SENTENCE_END = frozenset("。！？!?；;…\n")
_CLAUSE_END = frozenset("，,、：:—")
_CLOSERS = frozenset("\"'”’)）」』》】")
_STREAM_SENTENCE_ENDS = frozenset(".!?;。！？；…\n")
_STREAM_CJK_ENDS = frozenset("。！？；…\n")

Units = list[str]
Boundary = Callable[[Units, int], bool]


def _units(text: str) -> Units:
    out: Units = []
    for piece, is_token in split_control_tokens(text):
        if is_token:
            out.append(piece)
        else:
            out.extend(piece)
    return out


def _is_sentence_end(units: Units, i: int) -> bool:
    u = units[i]
    if u in _SENTENCE_END:
        return True
    if u != ".":
        return False
    # "3.14", "v0.2.5" and "e.g." are not ends: the next unit must be a space,
    # the end, a closer, a control token or a Chinese character.
    nxt = units[i + 1] if i + 1 < len(units) else " "
    return nxt.isspace() or nxt in _CLOSERS or len(nxt) > 1 or "\u4e00" <= nxt <= "\u9fff"


def _is_clause_end(units: Units, i: int) -> bool:
    u = units[i]
    if u in (",", ":"):  # "1,000" and "10:30" are not clause ends
        nxt = units[i + 1] if i + 1 < len(units) else " "
        return not nxt.isdigit()
    return u in _CLAUSE_END or _is_sentence_end(units, i)


def _is_space(units: Units, i: int) -> bool:
    return units[i].isspace()


def _split_after(units: Units, is_boundary: Boundary) -> list[Units]:
    """Cut after each boundary, keeping trailing marks, closers, spaces and
    control tokens with the piece they close."""
    pieces: list[Units] = []
    start, i, n = 0, 0, len(units)
    while i < n:
        if is_boundary(units, i):
            i += 1
            while i < n and (units[i] in _CLOSERS or units[i].isspace() or len(units[i]) > 1 or is_boundary(units, i)):
                i += 1
            pieces.append(units[start:i])
            start = i
        else:
            i += 1
    if start < n:
        pieces.append(units[start:])
    return pieces


_LEVELS: tuple[Boundary, ...] = (_is_sentence_end, _is_clause_end, _is_space)


def _fit(units: Units, max_units: int, level: int) -> list[Units]:
    """Split ``units`` into pieces of at most ``max_units``, preferring the
    coarsest boundary level, and pack neighbouring pieces while they fit."""
    if len(units) <= max_units:
        return [units]
    if level >= len(_LEVELS):
        return [units[i : i + max_units] for i in range(0, len(units), max_units)]
    pieces = _split_after(units, _LEVELS[level])
    if len(pieces) == 1:
        return _fit(units, max_units, level + 1)
    out: list[Units] = []
    current: Units = []
    for piece in pieces:
        for sub in _fit(piece, max_units, level + 1):
            if current and len(current) + len(sub) > max_units:
                out.append(current)
                current = []
            current = current + sub
    if current:
        out.append(current)
    return out


def is_speakable(segment: str) -> bool:
    """Whether the text has a letter, digit or ideograph outside control tokens."""
    plain = "".join(piece for piece, is_token in split_control_tokens(segment) if not is_token)
    return any(ch.isalnum() for ch in plain)


def split_text(text: str, max_units: int) -> list[str]:
    """Cut ``text`` into segments of at most ``max_units`` units.

    Args:
        text: normalized text (control tokens allowed).
        max_units: the longest segment, in characters (a control token counts as one).

    Returns:
        The stripped, non-empty segments in order; a segment with nothing to say
        (only punctuation or control tokens) is joined to the one before when
        that fits, else kept only if it holds a control token. Empty input
        gives an empty list.

    Raises:
        ValueError: ``max_units`` is smaller than 1.
    """
    if max_units < 1:
        raise ValueError(f"max_units must be at least 1, got {max_units}")
    segments: list[str] = []
    for units in _fit(_units(text.strip()), max_units, 0):
        segment = "".join(units).strip()
        if not segment:
            continue
        if is_speakable(segment):
            segments.append(segment)
        elif segments and len(_units(segments[-1] + segment)) <= max_units:
            segments[-1] += segment
        elif any(is_token for _, is_token in split_control_tokens(segment)):
            segments.append(segment)  # a lone [laugh] is still something to say
    return segments


class SentenceBuffer:
    """Cuts incrementally arriving text (an LLM's token stream) at sentence ends.

    ``push`` returns the sentences completed so far; a Latin full stop counts only
    once the next character shows it is no decimal point. Text longer than
    ``max_chars`` with no sentence end is cut at a clause or word boundary.
    """

    def __init__(self, max_chars: int = DEFAULT_MAX_SEGMENT_CHARS) -> None:
        self.max_chars = max_chars
        self._buffer = ""

    def push(self, text: str) -> list[str]:
        self._buffer += text
        cut = self._last_sentence_end()
        out: list[str] = []
        if cut:
            out, self._buffer = [self._buffer[:cut]], self._buffer[cut:]
        if len(self._buffer) > self.max_chars:
            pieces = split_text(self._buffer, self.max_chars)
            out.extend(pieces[:-1])
            self._buffer = pieces[-1] if pieces else ""
        return [s for s in out if s.strip()]

    def flush(self) -> list[str]:
        rest, self._buffer = self._buffer, ""
        return [rest] if rest.strip() else []

    def _last_sentence_end(self) -> int:
        """Index just after the last certain sentence end, 0 when none."""
        buf = self._buffer
        for i in range(len(buf) - 1, -1, -1):
            ch = buf[i]
            if ch in _STREAM_CJK_ENDS:
                return i + 1
            if ch in _STREAM_SENTENCE_ENDS and i + 1 < len(buf) and buf[i + 1].isspace():
                return i + 1
        return 0
