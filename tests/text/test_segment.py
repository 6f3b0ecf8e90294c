"""segment: long text cut at sentence/clause boundaries within a maximum length."""

from __future__ import annotations

import pytest

from turbotts.text.sanitize import CONTROL_TOKEN_RE
from turbotts.text.segment import split_text


def _units(s: str) -> int:
    return len(CONTROL_TOKEN_RE.sub("#", s))


def test_sentences_are_packed_within_limit() -> None:
    text = "你好。[uv_break]欢迎使用语音合成，这是一个测试。今天天气很好！我们去公园吧？好的。"
    segs = split_text(text, 12)
    assert segs == [
        "你好。[uv_break]",
        "欢迎使用语音合成，",
        "这是一个测试。",
        "今天天气很好！",
        "我们去公园吧？好的。",
    ]
    assert "".join(segs) == text


def test_short_text_is_one_segment() -> None:
    assert split_text("  Hello world. Bye.  ", 100) == ["Hello world. Bye."]


def test_english_decimal_is_not_a_sentence_end() -> None:
    segs = split_text("Pi is 3.14 exactly. Version v0.2.5 works.", 25)
    assert segs == ["Pi is 3.14 exactly.", "Version v0.2.5 works."]


def test_hard_split_on_whitespace_then_characters() -> None:
    assert split_text("word " * 6, 10) == ["word word", "word word", "word word"]
    assert split_text("a" * 25, 10) == ["a" * 10, "a" * 10, "a" * 5]


def test_control_tokens_never_split() -> None:
    text = "[laugh]" * 5 + "测试" + "[uv_break]" * 3
    for max_units in (1, 2, 3, 7):
        segs = split_text(text, max_units)
        assert "".join(segs) == text
        for seg in segs:
            assert _units(seg) <= max_units
            assert CONTROL_TOKEN_RE.sub("", seg).count("[") == 0


@pytest.mark.parametrize("max_units", [5, 17, 40])
def test_every_segment_fits_and_nothing_is_lost(max_units: int) -> None:
    text = (
        "第一句话很长很长很长很长很长很长很长，还有从句；然后结束。"
        "Second sentence, with a clause: and more words here! 最后[laugh]。"
    )
    segs = split_text(text, max_units)
    assert all(_units(s) <= max_units for s in segs)
    assert "".join(segs).replace(" ", "") == text.replace(" ", "")


def test_punctuation_only_pieces_are_dropped_or_merged() -> None:
    assert split_text("你好。。。", 3) == ["你好。"]
    assert split_text("", 5) == []


def test_bad_limit() -> None:
    with pytest.raises(ValueError):
        split_text("x", 0)
