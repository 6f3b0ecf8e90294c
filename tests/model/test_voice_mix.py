"""Voice mix expressions (Kokoro's ``a*0.7+b*0.3``) and the weighted mean of speaker vectors."""

from __future__ import annotations

import pytest
import torch

from turbotts.errors import VoiceMixError
from turbotts.model.voice_mix import MixPart, is_voice_mix, mix_voices, parse_voice_mix


def test_equal_weights_when_none_are_given() -> None:
    assert parse_voice_mix("alloy+nova") == [MixPart("alloy", 0.5), MixPart("nova", 0.5)]


def test_weights_are_normalized_to_sum_to_one() -> None:
    parts = parse_voice_mix(" alloy * 0.7 + nova*0.3 ")
    assert [p.name for p in parts] == ["alloy", "nova"]
    assert [p.weight for p in parts] == pytest.approx([0.7, 0.3])
    assert [p.weight for p in parse_voice_mix("a*2+b*1+c*1")] == pytest.approx([0.5, 0.25, 0.25])
    assert parse_voice_mix("solo*3") == [MixPart("solo", 1.0)]


@pytest.mark.parametrize("text", ["alloy+", "+nova", "alloy*+nova", "alloy*0+nova", "alloy*-1+nova", "a*x+b", "a b+c"])
def test_malformed_mixes_are_refused(text: str) -> None:
    with pytest.raises(VoiceMixError):
        parse_voice_mix(text)


def test_at_most_eight_voices() -> None:
    with pytest.raises(VoiceMixError, match="at most 8"):
        parse_voice_mix("+".join(f"v{i}" for i in range(9)))


def test_is_voice_mix() -> None:
    assert is_voice_mix("a+b") and is_voice_mix("a*1")
    assert not is_voice_mix("alloy") and not is_voice_mix("\u4e00\u4e01")


def test_mix_is_the_weighted_mean_in_float32_stored_as_float16() -> None:
    a = torch.tensor([1.0, 0.0, 2.0], dtype=torch.float16)
    b = torch.tensor([0.0, 1.0, 4.0], dtype=torch.float16)
    mixed = mix_voices([a, b], [0.75, 0.25])
    assert mixed.dtype == torch.float16
    assert mixed.tolist() == [0.75, 0.25, 2.5]
    assert torch.equal(mix_voices([a, b], [1.0, 0.0]), a)


def test_mix_checks_its_inputs() -> None:
    a = torch.zeros(3, dtype=torch.float16)
    with pytest.raises(VoiceMixError):
        mix_voices([a, torch.zeros(4, dtype=torch.float16)], [0.5, 0.5])
    with pytest.raises(VoiceMixError):
        mix_voices([a], [0.5, 0.5])
