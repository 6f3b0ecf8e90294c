"""Captions as WebVTT or SRT files, from the timeline's sample-exact spans.

Written here rather than through a library: both formats are a header (VTT), a
counter (SRT) and ``start --> end`` lines, and what needs care is the cue text
(VTT takes no raw ``&``, ``<`` or ``-->``; neither takes a blank line inside a
cue), a dozen lines either way. The tests read the files back with the
independent webvtt-py and srt packages. Times are rounded to the millisecond,
the finest both formats write. A caption whose voice is named (SSML ``<voice>``) is a
WebVTT voice span (``<v nova>Hello.``) and, in SRT, which has no voices, a ``nova: `` prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from turbotts.errors import InvalidInputError
from turbotts.server.audio.timeline import Caption

CAPTION_SUFFIXES = (".vtt", ".srt")


def _clock(num_samples: int, sample_rate_hz: int, separator: str) -> str:
    total_ms = round(num_samples * 1000 / sample_rate_hz)
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, ms = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{separator}{ms:03d}"


def _one_line(text: str) -> str:
    return " ".join(text.split())  # no blank line can end the cue early


def _vtt_escape(text: str) -> str:
    return _one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_webvtt(captions: Sequence[Caption]) -> str:
    """A WebVTT document, one cue per caption."""
    cues = ["WEBVTT", ""]
    for caption in captions:
        text = _vtt_escape(caption.text)
        if caption.voice is not None:
            text = f"<v {_vtt_escape(caption.voice)}>{text}"
        start = _clock(caption.start_sample, caption.sample_rate_hz, ".")
        end = _clock(caption.end_sample, caption.sample_rate_hz, ".")
        cues += [f"{start} --> {end}", text, ""]
    return "\n".join(cues)


def to_srt(captions: Sequence[Caption]) -> str:
    """An SRT document, cues numbered from 1."""
    cues: list[str] = []
    for number, caption in enumerate(captions, start=1):
        start = _clock(caption.start_sample, caption.sample_rate_hz, ",")
        end = _clock(caption.end_sample, caption.sample_rate_hz, ",")
        text = caption.text if caption.voice is None else f"{caption.voice}: {caption.text}"
        cues += [str(number), f"{start} --> {end}", _one_line(text).replace("-->", "->"), ""]
    return "\n".join(cues)


def check_caption_path(path: Path) -> None:
    """Raises InvalidInputError unless ``path`` ends in .vtt or .srt (checked before any synthesis)."""
    if path.suffix.lower() not in CAPTION_SUFFIXES:
        raise InvalidInputError(f"--captions must name a .vtt or .srt file, not {path.name!r}")


def write_captions(path: Path, captions: Sequence[Caption]) -> None:
    """WebVTT or SRT by the file's suffix.

    Raises:
        InvalidInputError: the suffix is neither .vtt nor .srt.
    """
    check_caption_path(path)
    text = to_webvtt(captions) if path.suffix.lower() == ".vtt" else to_srt(captions)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
