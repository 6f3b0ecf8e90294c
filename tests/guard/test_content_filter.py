"""Content filter: evasions are caught, innocent text passes, the list reloads without a restart."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from turbotts.errors import ContentFilteredError, InvalidInputError, TurboTTSError
from turbotts.guard.content_filter import ContentFilter, Match
from turbotts.server.web.errors import describe

TERMS = ["forbidden", "bad phrase", "ass", "违禁词"]


@pytest.fixture()
def content_filter() -> ContentFilter:
    return ContentFilter(TERMS)


@pytest.mark.parametrize(
    ("text", "term"),
    [
        ("this is forbidden.", "forbidden"),
        ("FoRbIdDeN", "forbidden"),
        ("ｆｏｒｂｉｄｄｅｎ", "forbidden"),  # full-width
        ("for\u200bbid\u200dden", "forbidden"),  # zero-width
        ("f o r b i d d e n", "forbidden"),  # spaced letters
        ("f.o.r.b.i.d.d.e.n!", "forbidden"),
        ("forb-idd_en", "forbidden"),
        ("f0rb1dd3n", "forbidden"),  # leetspeak
        ("say the BAD   phrase now", "bad phrase"),
        ("bad-phrase", "bad phrase"),
        ("you @$$", "ass"),
        ("这是违 禁\u200b词。", "违禁词"),
    ],
)
def test_evasions_are_caught(content_filter: ContentFilter, text: str, term: str) -> None:
    assert content_filter.check(text) == Match(term)


@pytest.mark.parametrize(
    "text",
    [
        "a classic class assignment",
        "Bad weather, but a nice phrase.",
        "Call me at 4 5 3 0",
        "",
        "你好，世界",
        "pass 4 ss",
    ],
)
def test_innocent_text_passes(content_filter: ContentFilter, text: str) -> None:
    assert content_filter.check(text) is None


def test_leetspeak_is_optional() -> None:
    assert ContentFilter(TERMS, leetspeak=False).check("f0rb1dd3n") is None


def test_ensure_allowed_raises_the_filtered_error(content_filter: ContentFilter) -> None:
    with pytest.raises(ContentFilteredError) as info:
        content_filter.ensure_allowed("forbidden")
    assert isinstance(info.value, InvalidInputError)
    assert describe(info.value)[1]["error"]["code"] == "content_filtered"  # what the server answers
    assert info.value.term == "forbidden"


def test_reload_from_file(tmp_path: Path) -> None:
    path = tmp_path / "blocklist.txt"
    path.write_text("# comment\nalpha\n\n", encoding="utf-8")
    content_filter = ContentFilter.from_file(path)
    assert content_filter.check("alpha") == Match("alpha") and content_filter.check("beta") is None
    path.write_text("beta\n", encoding="utf-8")
    results: list[Match | None] = []
    readers = [
        threading.Thread(target=lambda: results.extend(content_filter.check("alpha beta") for _ in range(200)))
        for _ in range(2)
    ]
    for reader in readers:
        reader.start()
    content_filter.reload()
    for reader in readers:
        reader.join()
    assert all(r in (Match("alpha"), Match("beta")) for r in results)
    assert content_filter.check("alpha") is None and content_filter.check("BETA") == Match("beta")
    path.unlink()
    with pytest.raises(TurboTTSError, match="blocklist"):
        content_filter.reload()
    assert content_filter.check("beta") == Match("beta")  # the previous list stays in force
    with pytest.raises(TurboTTSError, match="built from a list"):
        ContentFilter(["x"]).reload()
