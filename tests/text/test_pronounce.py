"""pronounce: user polyphone dictionary."""

from __future__ import annotations

import pytest

from turbotts.errors import InvalidInputError
from turbotts.text.pronounce import COMMON_POLYPHONES, PronunciationDict


def test_common_polyphones_in_context() -> None:
    d = PronunciationDict.from_dict(COMMON_POLYPHONES)
    assert d.apply("我去银行重新办卡，然后和面。") == "我去银杭虫新办卡，然后活面。"
    assert d.apply("行不行，重要，和平") == "行不行，重要，和平"  # other contexts untouched


def test_longest_match_first() -> None:
    d = PronunciationDict.from_dict({"行": "型", "银行": "银杭", "银行卡": "银杭卡"})
    assert d.apply("银行卡和银行，行") == "银杭卡和银杭，型"


def test_control_tokens_untouched() -> None:
    d = PronunciationDict.from_dict({"break": "brake", "laugh": "laf"})
    assert d.apply("[uv_break]laugh[laugh_1]") == "[uv_break]laf[laugh_1]"


def test_empty_and_merge() -> None:
    assert PronunciationDict().apply("银行") == "银行"
    d = PronunciationDict.from_dict({"银行": "银杭"}).merged({"银行": "银航"})
    assert d.apply("银行") == "银航" and len(d) == 1


@pytest.mark.parametrize("bad", [{"": "x"}, {"a": 1}, {1: "a"}, {"[laugh]": "x"}, {"a": "[uv_break]"}])
def test_invalid_entries(bad: dict) -> None:
    with pytest.raises(InvalidInputError):
        PronunciationDict.from_dict(bad)
