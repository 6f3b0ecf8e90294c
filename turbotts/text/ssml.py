"""SSML input: a documented subset, parsed safely, read into utterances (text at a rate, in a voice) and pauses.

A document is SSML when it starts (after a byte-order mark and whitespace) with ``<?xml``
or ``<speak``: W3C, Azure and Google samples begin with an XML declaration. The subset
(anything else is an :class:`~turbotts.errors.SSMLError`, a 400 that names the element
and its line and column):

- ``<speak>``: the root; its attributes (``version``, ``xmlns``, ``xml:lang``) are ignored.
  Elements may be in no namespace or in SSML's (``http://www.w3.org/2001/10/synthesis``,
  default or prefixed); any other namespace (``mstts:``) is refused.
- ``<voice name="...">``: its content in that voice (a saved or built-in name, a mix or a voice
  string, resolved as the request's ``voice``); nested voices: the innermost wins. A boundary.
- ``<emphasis>``: ignored, its content is spoken (ChatTTS has no stress control).
- ``<audio>``: refused (the server fetches no audio files); write its fallback text instead.
- ``<break time="500ms"/>`` (or ``"1.5s"``, or ``strength="none|x-weak|weak|medium|strong|x-strong"``):
  exactly that much silence, at most 10 s each and 300 s per request, never crossfaded or stretched.
- ``<prosody rate="...">``: ``x-slow`` (0.5) .. ``x-fast`` (2.0), ``80%`` (of normal), ``+20%``/``-20%``
  (relative) or a multiplier (``1.5``); nested rates multiply; applied as a pitch-keeping time-stretch.
- ``<say-as interpret-as="characters|digits|cardinal|date|telephone">`` (``format="ymd|mdy|dmy"``
  for dates): rendered by :mod:`turbotts.text.say_as`.
- ``<sub alias="...">``: the alias is said instead of the content.
- ``<p>``, ``<s>``: segment boundaries (each caption is a segment).
- ``<phoneme ph="..." alphabet="x-homophone">``: ``ph`` is said instead of the content, a one-off
  entry of the pronunciation dictionary (a homophone respelling, the way
  :mod:`turbotts.text.pronounce` works). Phonetic alphabets (``ipa``, ``x-sampa``, pinyin) are
  refused: ChatTTS has no phoneme input.

:func:`parse_ssml` only reads the document: the text between boundaries comes out whole, and
:func:`turbotts.text.segmenter.split_input` cleans and cuts it as it cuts plain text.

ChatTTS control tokens (``[uv_break]``, ``[laugh]``) in the text pass through. The
document is parsed with defusedxml and DTDs forbidden, so there is no entity
expansion (no "billion laughs") and no external entity or DTD is ever fetched.
Pure: no torch, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from xml.etree.ElementTree import Element, ParseError, TreeBuilder

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

from turbotts.errors import SSMLError
from turbotts.text import say_as
from turbotts.text.normalize import Lang, detect_language
from turbotts.text.utterances import Pause, SpeechItem, Utterance

MAX_BREAK_MS = 10_000
MAX_TOTAL_BREAK_MS = 300_000
MAX_DEPTH = 32
MIN_RATE, MAX_RATE = 0.25, 4.0
_SSML_START_RE = re.compile(r"^\ufeff?\s*(?:<\?xml[\s?]|<speak[\s>/])")
_LEAD_RE = re.compile(r"^\ufeff?(?:\s*(?=<\?xml[\s?]))?")  # a BOM, and spaces before a declaration: XML wants none
SSML_NAMESPACE = "http://www.w3.org/2001/10/synthesis"
_TIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*$")
_STRENGTH_MS = {"none": 0, "x-weak": 100, "weak": 250, "medium": 400, "strong": 750, "x-strong": 1200}
_RATE_LABELS = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 2.0}
_RATE_RE = re.compile(r"^([+-]?)(\d+(?:\.\d+)?)(%?)$")
_ATTRIBUTES = {  # allowed attributes per element (local names)
    "speak": None,  # any: version, xmlns, xml:lang, ...
    "p": {"lang"},
    "s": {"lang"},
    "break": {"time", "strength"},
    "prosody": {"rate"},
    "say-as": {"interpret-as", "format", "detail"},
    "sub": {"alias"},
    "phoneme": {"ph", "alphabet"},
    "voice": {"name"},
    "emphasis": {"level"},
}
_HOMOPHONE_ALPHABETS = frozenset({"x-homophone", ""})
Position = tuple[int, int]


def is_ssml(text: str) -> bool:
    """Whether plain input should be read as SSML: it starts with ``<?xml`` or ``<speak`` (after a BOM and spaces)."""
    return _SSML_START_RE.match(text) is not None


def _local(name: str) -> str:
    return name.rsplit("}", 1)[-1]


def _namespace(name: str) -> str:
    return name[1:].split("}", 1)[0] if name.startswith("{") else ""


class _Builder(TreeBuilder):
    """A tree builder that remembers where each element starts and which elements are open."""

    def __init__(self) -> None:
        super().__init__()
        self.where: Callable[[], Position] = lambda: (1, 1)
        self.positions: dict[Element, Position] = {}
        self.open: list[tuple[str, Position]] = []

    def start(self, tag: str, attrs: dict[str, str]) -> Element:
        element = super().start(tag, attrs)
        position = self.where()
        self.positions[element] = position
        self.open.append((_local(tag), position))
        return element

    def end(self, tag: str) -> Element:
        self.open.pop()
        return super().end(tag)


def _parse(text: str) -> tuple[Element, dict[Element, Position]]:
    builder = _Builder()
    parser = DefusedXMLParser(target=builder, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    expat = parser.parser
    lead = _LEAD_RE.match(text)  # dropped before parsing; positions still count it
    skipped = lead[0] if lead is not None else ""
    num_lines, column = skipped.count("\n"), len(skipped) - skipped.rfind("\n") - 1
    text = text[len(skipped) :]

    def where() -> Position:
        line = expat.CurrentLineNumber
        return line + num_lines, expat.CurrentColumnNumber + 1 + (column if line == 1 else 0)

    builder.where = where
    try:
        parser.feed(text)
        root = parser.close()
    except DefusedXmlException as exc:  # a DOCTYPE, entity declaration or external reference
        line, column = builder.where()
        raise SSMLError(
            f"SSML: {type(exc).__name__} at line {line}, column {column}: document type declarations and entities "
            "are not accepted; write the text out (&amp; &lt; &gt; &quot; &apos; are fine)",
            "!DOCTYPE", line, column,
        ) from None  # fmt: skip
    except ParseError as exc:
        line, offset = exc.position
        offset += column if line == 1 else 0
        line += num_lines
        reason = str(exc).split(":")[0].removeprefix("not well-formed ").strip("()")
        inside = f" inside <{builder.open[-1][0]}> opened at line {builder.open[-1][1][0]}, column " \
            f"{builder.open[-1][1][1]}" if builder.open else ""  # fmt: skip
        element = builder.open[-1][0] if builder.open else None
        raise SSMLError(
            f"SSML is not well-formed XML at line {line}, column {offset + 1} ({reason}){inside}; "
            "close every element and escape & and < in text", element, line, offset + 1,
        ) from None  # fmt: skip
    return root, builder.positions


def _break_ms(attrs: dict[str, str], fail: Callable[[str], SSMLError]) -> float:
    if "time" in attrs:
        match = _TIME_RE.match(attrs["time"])
        if match is None:
            raise fail(f'time must look like "500ms" or "1.5s", not {attrs["time"][:40]!r}')
        duration_ms = float(match[1]) * (1000 if match[2] == "s" else 1)
    else:
        strength = attrs.get("strength", "medium")
        if strength not in _STRENGTH_MS:
            raise fail(f"strength must be one of {', '.join(_STRENGTH_MS)}, not {strength[:40]!r}")
        duration_ms = _STRENGTH_MS[strength]
    if duration_ms > MAX_BREAK_MS:
        raise fail(f"a break lasts at most {MAX_BREAK_MS} ms, not {duration_ms:g} ms; use several")
    return duration_ms


def _rate(value: str, fail: Callable[[str], SSMLError]) -> float:
    value = value.strip()
    if value in _RATE_LABELS:
        return _RATE_LABELS[value]
    match = _RATE_RE.match(value)
    if match is None:
        raise fail(f"rate must be x-slow..x-fast, a percentage (80%, +20%) or a multiplier (1.5), not {value[:40]!r}")
    sign, number, percent = match[1], float(match[2]), match[3]
    if sign:
        return 1.0 + (number if sign == "+" else -number) / (100 if percent else 1)
    return number / 100 if percent else number


class _Reader:
    """Walks the tree, collecting text into utterances and cutting at ``<p>``, ``<s>``, breaks and rate changes."""

    def __init__(self, positions: dict[Element, Position], lang: Lang) -> None:
        self.positions = positions
        self.lang = lang
        self.items: list[SpeechItem] = []
        self._pieces: list[str] = []
        self._rate = 1.0
        self._voice: str | None = None
        self._total_break_ms = 0.0

    def text(self, text: str | None, rate: float, voice: str | None) -> None:
        if not text:
            return
        if self._pieces and (rate != self._rate or voice != self._voice):
            self.boundary()
        self._rate, self._voice = rate, voice
        self._pieces.append(text)

    def boundary(self) -> None:
        text = " ".join("".join(self._pieces).split())
        self._pieces = []
        if text:
            self.items.append(Utterance(text, self._rate, self._voice))

    def walk(self, element: Element, rate: float, voice: str | None, depth: int) -> None:
        name = _local(element.tag)
        line, column = self.positions[element]

        def fail(problem: str) -> SSMLError:
            return SSMLError(f"SSML <{name}> at line {line}, column {column}: {problem}", name, line, column)

        self._check(element, name, depth, fail)
        attrs = {_local(key): value for key, value in element.attrib.items()}
        if name == "break":
            if len(element) or (element.text or "").strip():
                raise fail('a break takes no content; write <break time="500ms"/>')
            self.pause(_break_ms(attrs, fail), fail)
        elif name in ("say-as", "sub", "phoneme"):
            self.text(self._replacement(name, element, attrs, fail), rate, voice)
        else:
            if name == "prosody" and "rate" in attrs:
                rate *= _rate(attrs["rate"], fail)
                if not MIN_RATE <= rate <= MAX_RATE:
                    raise fail(f"the rate comes to {rate:.3g}, outside {MIN_RATE}..{MAX_RATE}")
            if name == "voice":
                voice = _voice_name(attrs, fail)
            if name in ("p", "s", "voice"):
                self.boundary()
            self.text(element.text, rate, voice)
            for child in element:
                self.walk(child, rate, voice, depth + 1)
                self.text(child.tail, rate, voice)
            if name in ("p", "s", "voice"):
                self.boundary()

    def _check(self, element: Element, name: str, depth: int, fail: Callable[[str], SSMLError]) -> None:
        if _namespace(element.tag) not in ("", SSML_NAMESPACE):
            raise fail(f"elements of namespace {_namespace(element.tag)[:80]!r} are not supported; use SSML's own")
        if name == "audio":
            raise fail("this element is not supported: the server fetches no audio files; write its fallback text")
        if name not in _ATTRIBUTES:
            raise fail(f"this element is not supported; use {', '.join(f'<{n}>' for n in _ATTRIBUTES)}")
        if (name == "speak") != (depth == 0):
            raise fail("<speak> must be the root element, and only the root")
        if depth > MAX_DEPTH:
            raise fail(f"elements nest more than {MAX_DEPTH} deep")
        allowed = _ATTRIBUTES[name]
        for key in element.attrib:
            if allowed is not None and _local(key) not in allowed:
                raise fail(f"attribute {_local(key)[:40]!r} is not supported here; use {sorted(allowed) or 'none'}")
        if name in ("say-as", "sub", "phoneme") and len(element):
            raise fail(f"takes text only, found <{_local(element[0].tag)}> inside")

    def _replacement(self, name: str, element: Element, attrs: dict[str, str], fail: Callable[[str], SSMLError]) -> str:
        """What a ``say-as``, ``sub`` or ``phoneme`` element says instead of its content."""
        content = element.text or ""
        if name == "sub":
            if "alias" not in attrs:
                raise fail('needs alias="what to say"')
            return attrs["alias"]
        if name == "phoneme":
            if "ph" not in attrs:
                raise fail('needs ph="homophone respelling"')
            if attrs.get("alphabet", "") not in _HOMOPHONE_ALPHABETS:
                raise fail(
                    f"alphabet {attrs['alphabet'][:40]!r} is not supported (ChatTTS takes no phonemes); give ph as a "
                    'homophone respelling with alphabet="x-homophone", or use <sub alias>'
                )
            return attrs["ph"]
        if "interpret-as" not in attrs:
            raise fail('needs interpret-as="characters|digits|cardinal|date|telephone"')
        try:
            return say_as.render(attrs["interpret-as"], content, self.lang, attrs.get("format"))
        except ValueError as exc:
            raise fail(str(exc)) from None

    def pause(self, duration_ms: float, fail: Callable[[str], SSMLError]) -> None:
        self._total_break_ms += duration_ms
        if self._total_break_ms > MAX_TOTAL_BREAK_MS:
            raise fail(f"breaks add up to more than {MAX_TOTAL_BREAK_MS // 1000} s in one request")
        self.boundary()
        self.items.append(Pause(duration_ms))


def _voice_name(attrs: dict[str, str], fail: Callable[[str], SSMLError]) -> str:
    name = attrs.get("name", "").strip()
    if not name:
        raise fail('needs name="a saved or built-in voice, a mix or a voice string"')
    return name


def parse_ssml(text: str) -> list[SpeechItem]:
    """The utterances and pauses an SSML document asks for, in order.

    Args:
        text: the document, ``<speak>`` at its root, optionally after an XML declaration.

    Returns:
        Utterances (the text between two boundaries, whitespace collapsed, with its rate and
        the voice of the innermost ``<voice>`` around it, None outside any; not
        yet sanitized or cut into segments) and pauses; the list may hold no utterance at all.

    Raises:
        SSMLError: not well-formed, a DTD or entity declaration, or markup outside the subset.
    """
    root, positions = _parse(text)
    reader = _Reader(positions, detect_language("".join(root.itertext())))
    reader.walk(root, 1.0, None, 0)
    reader.boundary()
    return reader.items
