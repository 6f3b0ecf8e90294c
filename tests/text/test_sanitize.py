"""sanitize: markup/emoji/invisible removal and the official invalid-character map."""

from __future__ import annotations

import logging

import pytest

from tests.golden import FIXTURE_DIR, case
from turbotts.redaction import text_sha256
from turbotts.text.sanitize import (
    charset_from_vocab,
    collapse_punctuation,
    map_unrepresentable,
    sanitize,
    split_control_tokens,
)

A_CASES = case("a_normalizer")["outputs"]


@pytest.mark.parametrize("item", A_CASES, ids=[c["id"] for c in A_CASES])
def test_norm0_path_matches_official(item: dict[str, str]) -> None:
    # The official norm=0, homophone=0 path is exactly the char map + charset removal.
    assert map_unrepresentable(item["input"]) == item["norm=0,homophone=0"]


def test_dropped_characters_are_counted_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert map_unrepresentable("a#b жзи#") == "ab "
    assert "dropped 5 characters" in caplog.text and "4 distinct" in caplog.text
    assert f"sha256:{text_sha256('#жзи')}" in caplog.text  # the sorted distinct set, as a digest
    assert "#" not in caplog.text and "жзи" not in caplog.text


def test_vocab_charset() -> None:
    import json

    vocab = json.loads((FIXTURE_DIR / "asset" / "tokenizer" / "tokenizer.json").read_text())["model"]["vocab"]
    chars = charset_from_vocab(vocab)
    assert {"你", "a", "Z", "5", " ", "，"} <= chars
    assert "魑" not in chars
    # mapped when the target is representable, dropped otherwise, tokens intact
    assert map_unrepresentable("魑你[uv_break]好", chars) == "你[uv_break]好"
    assert map_unrepresentable("a\tb", {"a", "b", " "}) == "a b"


def test_control_tokens_are_atomic() -> None:
    parts = split_control_tokens("a[uv_break]b[laugh_2][note]")
    assert parts == [("a", False), ("[uv_break]", True), ("b", False), ("[laugh_2]", True), ("[note]", False)]


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("<speak><b>Hello</b> world</speak>", "Hello world"),
        ("a &amp; b", "a & b"),
        ("好😀👍🏽的", "好的"),
        ("zero\u200bwidth\ufeff", "zerowidth"),
        ("bell\x07 line\nnext\ttab", "bell line next tab"),
        ("Really!!!   Yes??", "Really! Yes?"),
        ("你好。。。世界，，", "你好。世界，"),
        ("word , next", "word, next"),
        ("[uv_break]!![laugh]", "[uv_break]![laugh]"),
        ("<p>😀</p>  ", ""),
    ],
)
def test_sanitize(raw: str, clean: str) -> None:
    assert sanitize(raw) == clean


def test_collapse_keeps_tokens() -> None:
    assert collapse_punctuation("[speed_5]..[uv_break]") == "[speed_5].[uv_break]"
