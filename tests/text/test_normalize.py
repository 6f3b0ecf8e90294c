"""normalize: numbers, dates, units... as words; official behaviour where it makes sense."""

from __future__ import annotations

import re

import pytest

from tests.golden import case
from turbotts.text.normalize import detect_language, normalize
from turbotts.text.number_words import normalize_en, normalize_zh
from turbotts.text.sanitize import map_unrepresentable

A_CASES = {c["id"]: c for c in case("a_normalizer")["outputs"]}


def _full(text: str) -> str:
    """What the pipeline feeds the tokenizer: normalize, then the official charset."""
    return map_unrepresentable(normalize(text))


@pytest.mark.parametrize("cid", ["zh", "zh_homophones", "zh_digits", "en", "mixed"])
def test_language_detection_matches_official(cid: str) -> None:
    assert detect_language(A_CASES[cid]["input"]) == A_CASES[cid]["detected_lang"]


def test_detection_ignores_control_tokens() -> None:
    # Deviation: the official counts [Stts], [laugh] as English words and says "en".
    assert detect_language(A_CASES["tags"]["input"]) == "zh"


@pytest.mark.parametrize("cid", ["mixed", "zh_homophones"])
def test_norm1_matches_official_without_digits(cid: str) -> None:
    assert _full(A_CASES[cid]["input"]) == A_CASES[cid]["norm=1,homophone=0"]


def test_zh_question_mark_becomes_stop() -> None:
    # Official: "你好，世界。 今天天气怎么样" (the question mark is deleted).
    assert _full(A_CASES["zh"]["input"]) == "你好，世界。 今天天气怎么样。"


def test_zh_digits_are_spoken_not_deleted() -> None:
    # Official norm=1 gives "年月日，价格是元。" (digits deleted).
    assert _full(A_CASES["zh_digits"]["input"]) == "二零二四年三月五日，价格是一百元。"


def test_en_version_keeps_digits_as_words() -> None:
    out = _full(A_CASES["en"]["input"])
    assert out == "Hello world. This is ChatTTS, version zero point two point five, a test, ok."
    assert not re.search(r"\d", out)


def test_tags_pass_through() -> None:
    assert _full(A_CASES["tags"]["input"]) == "[Stts]你好[laugh]，hello，[uv_break]"
    assert normalize("[speed_5]第3章[break_6]", "zh") == "[speed_5]第三章[break_6]"


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("2024-03-05", "二零二四年三月五日"),
        ("10:30开会", "十点三十分开会"),
        ("8:05", "八点零五分"),
        ("温度-3.5℃", "温度零下三点五摄氏度"),
        ("增长50%", "增长百分之五十"),
        ("重100kg", "重一百千克"),
        ("共1,234,567人", "共一百二十三万四千五百六十七人"),
        ("电话13812345678", "电话一三八一二三四五六七八"),
        ("3-5天", "三到五天"),
        ("价格$100", "价格一百美元"),
        ("1+1=2", "一加一等于二"),
        ("1/2的人", "二分之一的人"),
        ("版本0.2.5", "版本零点二点五"),
        ("编号007", "编号零零七"),
    ],
)
def test_zh_rules(text: str, spoken: str) -> None:
    assert normalize_zh(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("I have 3 apples", "I have three apples"),
        ("$5.50", "five dollars and fifty cents"),
        ("$1", "one dollar"),
        ("50%", "fifty percent"),
        ("on 2024-03-05", "on March fifth, twenty twenty four"),
        ("at 3:05pm", "at three oh five p m"),
        ("at 10:00", "at ten o clock"),
        ("the 21st", "the twenty first"),
        ("in 1999", "in nineteen ninety nine"),
        ("in 2005", "in two thousand five"),
        ("3.14", "three point one four"),
        ("-5", "minus five"),
        ("5-10 minutes", "five to ten minutes"),
        ("100kg", "one hundred kilograms"),
        ("25°C", "twenty five degrees Celsius"),
        ("1,000,000 users", "one million users"),
        ("R&D", "R and D"),
        ("v2.0", "version two point zero"),
    ],
)
def test_en_rules(text: str, spoken: str) -> None:
    assert normalize_en(text).strip() == spoken


def test_mixed_text_reads_each_run_in_its_language() -> None:
    assert normalize("我买了3个iPhone 15，花了8999元") == "我买了三个iPhone fifteen，花了八千九百九十九元"
    assert normalize("跑了5km") == "跑了五千米"


def test_full_width_digits_and_letters() -> None:
    assert normalize("价格１００元") == "价格一百元"


def test_no_digits_survive_random_input() -> None:
    for text in ["1.2.3.4.5", "12:99", "9999-99-99", "00:00", "0.0", "1e10", "3 - 4", "１２%"]:
        for lang in ("zh", "en"):
            assert not re.search(r"\d", normalize(text, lang)), (text, lang)


def test_digits_cn2an_cannot_read_fall_back_and_log_no_text(caplog: pytest.LogCaptureFixture) -> None:
    # cn2an.an2cn raises on Arabic-Indic digits; this used to escape normalize (a 500)
    with caplog.at_level("WARNING", logger="turbotts.text.number_words"):
        assert normalize_zh("价格¥١٢٣٤元") == "价格¥一二三四元"
    assert "cn2an could not read sha256:" in caplog.text and "(8 chars)" in caplog.text
    assert "价格" not in caplog.text and "١" not in caplog.text
