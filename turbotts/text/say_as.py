"""SSML ``<say-as>``: the text of one element spelled out the way ``interpret-as`` asks.

Numbers and dates go through the same readings as :mod:`turbotts.text.normalize`
(``say_number``, ``say_digit``, ISO dates), so a ``say-as`` reads exactly as the
normalizer would read the unambiguous form. Each renderer raises ``ValueError``
with a message that says what it expected; :mod:`turbotts.text.ssml` adds the
element's position. Pure ``str -> str``: no torch, no I/O.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable

from turbotts.text.normalize import Lang, normalize, say_digit, say_number

_NUMBER_RE = re.compile(r"^[+-]?\d+(?:\.\d+)?$")
_DATE_PARTS_RE = re.compile(r"^(\d+)[-/. ](\d+)[-/. ](\d+)$")
_PHONE_RE = re.compile(r"^\+?[\d\s().-]+$")
DATE_FORMATS = ("ymd", "mdy", "dmy")


def _characters(text: str, lang: Lang, fmt: str | None) -> str:
    chars = [say_digit(ch, lang) if ch.isascii() and ch.isdigit() else ch for ch in text if not ch.isspace()]
    return " ".join(chars)


def _digits(text: str, lang: Lang, fmt: str | None) -> str:
    compact = re.sub(r"[\s-]", "", text)
    if not compact.isascii() or not compact.isdigit():
        raise ValueError(f"say-as digits takes digits only (spaces and '-' allowed), got {text[:40]!r}")
    return (" " if lang == "en" else "").join(say_digit(d, lang) for d in compact)


def _cardinal(text: str, lang: Lang, fmt: str | None) -> str:
    compact = re.sub(r"[\s,_]", "", text).lstrip("+")
    if not _NUMBER_RE.match(compact) or not compact.isascii():
        raise ValueError(f"say-as cardinal takes a number such as 1234, -5 or 3.25, got {text[:40]!r}")
    return say_number(compact, lang)


def _date(text: str, lang: Lang, fmt: str | None) -> str:
    match = _DATE_PARTS_RE.match(text.strip())
    if match is None or not text.isascii():
        raise ValueError(f"say-as date takes three numbers such as 2024-05-01 or 05/01/2024, got {text[:40]!r}")
    if fmt is None:
        fmt = "ymd" if len(match[1]) == 4 else "mdy"
    if fmt not in DATE_FORMATS:
        raise ValueError(f"say-as date format must be one of {', '.join(DATE_FORMATS)}, not {fmt[:20]!r}")
    parts = dict(zip(fmt, (int(match[1]), int(match[2]), int(match[3])), strict=True))
    if parts["y"] < 1000:
        raise ValueError(f"say-as date needs a four-digit year, got {text[:40]!r} read as {fmt}")
    try:
        day = datetime.date(parts["y"], parts["m"], parts["d"])
    except ValueError as exc:
        raise ValueError(f"say-as date {text[:40]!r} read as {fmt} is not a date ({exc})") from None
    return normalize(day.isoformat(), lang)


def _telephone(text: str, lang: Lang, fmt: str | None) -> str:
    if not _PHONE_RE.match(text.strip()) or not any(ch.isdigit() for ch in text):
        raise ValueError(f"say-as telephone takes digits, spaces, '+', '-', '.' and brackets, got {text[:40]!r}")
    groups = [(" " if lang == "en" else "").join(say_digit(d, lang) for d in g) for g in re.findall(r"\d+", text)]
    spoken = (", " if lang == "en" else "，").join(groups)
    if text.strip().startswith("+"):
        spoken = ("plus " if lang == "en" else "加") + spoken
    return spoken


RENDERERS: dict[str, Callable[[str, Lang, str | None], str]] = {
    "characters": _characters,
    "spell-out": _characters,
    "digits": _digits,
    "cardinal": _cardinal,
    "number": _cardinal,
    "date": _date,
    "telephone": _telephone,
}


def render(interpret_as: str, text: str, lang: Lang, fmt: str | None = None) -> str:
    """``text`` as ``interpret_as`` reads it, in ``lang``.

    Raises:
        ValueError: an unknown ``interpret_as``, or text that is not what it names.
    """
    renderer = RENDERERS.get(interpret_as)
    if renderer is None:
        supported = ", ".join(RENDERERS)
        raise ValueError(f"say-as interpret-as={interpret_as[:40]!r} is not supported; use one of {supported}")
    return renderer(text, lang, fmt)
