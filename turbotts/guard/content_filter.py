"""A configurable blocklist for request text, robust to the usual evasions.

Why several views of the text: people dodge blocklists with full-width letters
(NFKC undoes them), case, zero-width characters, spaced (``b a d``) or dotted
(``b.a.d``) letters and leetspeak (``b4d``). Each view below undoes one trick,
and a term matches if it appears as a whole word in any view, so ``class`` never
trips on ``ass``. Terms with CJK characters match anywhere in the text with
spaces and punctuation removed, since those scripts do not separate words.

All terms are matched at once by an Aho-Corasick automaton (pyahocorasick):
linear in the text, whatever the size of the list. ``reload()`` rebuilds it from
its file and swaps it in one assignment, so checks running meanwhile see either
the old list or the new one, never half of each.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import ahocorasick

from turbotts.errors import ContentFilteredError, TurboTTSError

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u200e\u200f\u2060\u2061\u2062\u2063\u2064\ufeff\u00ad\u034f"))
_LEET = str.maketrans(
    {
        "0": "o",
        "1": "i",
        "3": "e",
        "4": "a",
        "5": "s",
        "7": "t",
        "8": "b",
        "@": "a",
        "$": "s",
        "!": "i",
        "|": "l",
        "+": "t",
    }
)
_LEET_TOKEN = re.compile(r"[\w@$!|+]+")
_WORD = re.compile(r"\w+")
_INTRA_WORD_PUNCT = re.compile(r"(?<=[^\W_])(?:[^\w\s]|_)+(?=[^\W_])")
_NUMBER = re.compile(r"[$]?\d+(?:[.,]\d+)*")
_SINGLE_CHAR_RUN = re.compile(r"(?<!\w)\w(?:[\W_]+\w(?!\w))+")


@dataclass(frozen=True)
class Match:
    """A blocked term found in a text (as written in the blocklist)."""

    term: str


def _is_cjk(term: str) -> bool:
    return any(unicodedata.east_asian_width(ch) in "WF" and ch.isalpha() for ch in term)


def normalize(text: str) -> str:
    """NFKC (full-width forms, ligatures), casefold, and no zero-width or formatting characters."""
    folded = unicodedata.normalize("NFKC", text).casefold().translate(_ZERO_WIDTH)
    return "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")


def _words(text: str) -> str:
    return " ".join(_WORD.findall(text.replace("_", " ")))


def _views(text: str, *, leetspeak: bool) -> list[str]:
    """The word-separated views of a normalized text, each padded with spaces for whole-word matching."""
    bases = [text]
    if leetspeak:
        bases.append(_LEET_TOKEN.sub(lambda m: m[0] if _NUMBER.fullmatch(m[0]) else m[0].translate(_LEET), text))
    views = []
    for base in bases:
        views.append(_words(base))  # punctuation splits words: "bad-word" -> "bad word"
        views.append(_words(_INTRA_WORD_PUNCT.sub("", base)))  # "b.a.d" or "ba-d" -> "bad"
        views.append(_words(_SINGLE_CHAR_RUN.sub(lambda m: "".join(_WORD.findall(m[0])), base)))  # "b a d" -> "bad"
    return [f" {view} " for view in dict.fromkeys(views)]


@dataclass(frozen=True)
class _Automata:
    words: ahocorasick.Automaton | None
    cjk: ahocorasick.Automaton | None


def _build(terms: Iterable[str]) -> _Automata:
    word_automaton, cjk_automaton = ahocorasick.Automaton(), ahocorasick.Automaton()
    for raw in terms:
        term = raw.strip()
        if not term or term.startswith("#"):
            continue
        key = normalize(term)
        if _is_cjk(key):
            cjk_automaton.add_word("".join(_WORD.findall(key)), term)
        elif _words(key):
            word_automaton.add_word(f" {_words(key)} ", term)
    for automaton in (word_automaton, cjk_automaton):
        if len(automaton):
            automaton.make_automaton()
    return _Automata(word_automaton if len(word_automaton) else None, cjk_automaton if len(cjk_automaton) else None)


def _read_terms(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TurboTTSError(
            f"cannot read the blocklist {path} ({exc}); fix the file (UTF-8, one term per line)"
        ) from exc


class ContentFilter:
    """Checks request text against a blocklist given as a list or a file (one term per line, ``#`` comments).

    Args:
        terms: the blocked words or phrases, when not read from ``path``.
        path: a UTF-8 file of terms; :meth:`reload` reads it again.
        leetspeak: also match ``b4d``-style spellings (digits and symbols inside words).
    """

    def __init__(self, terms: Iterable[str] = (), *, path: str | Path | None = None, leetspeak: bool = True) -> None:
        self._path = Path(path) if path is not None else None
        self._leetspeak = leetspeak
        self._lock = threading.Lock()  # serializes reloads; checks never wait
        self._automata = _build(_read_terms(self._path) if self._path is not None else list(terms))

    @classmethod
    def from_file(cls, path: str | Path, *, leetspeak: bool = True) -> ContentFilter:
        return cls(path=path, leetspeak=leetspeak)

    def reload(self) -> None:
        """Read the file again and swap the new list in atomically; on error the old list stays.

        Raises:
            TurboTTSError: the filter was built from a list, or the file cannot be read.
        """
        if self._path is None:
            raise TurboTTSError("this content filter was built from a list; build it with a path to reload it")
        with self._lock:
            self._automata = _build(_read_terms(self._path))

    def check(self, text: str) -> Match | None:
        """The first blocked term found in ``text``, or None when it may be synthesized."""
        automata = self._automata  # one read: a concurrent reload cannot mix lists
        normalized = normalize(text)
        if automata.cjk is not None:
            compact = "".join(_WORD.findall(normalized.replace("_", "")))
            for _, term in automata.cjk.iter(compact):
                return Match(term)
        if automata.words is not None:
            for view in _views(normalized, leetspeak=self._leetspeak):
                for _, term in automata.words.iter(view):
                    return Match(term)
        return None

    def ensure_allowed(self, text: str) -> None:
        """Raise :class:`ContentFilteredError` when ``text`` holds a blocked term."""
        match = self.check(text)
        if match is not None:
            raise ContentFilteredError(match.term)
