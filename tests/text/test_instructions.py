"""The ``instructions`` table: which plainly named instructions become which ChatTTS controls."""

from __future__ import annotations

import pytest

from turbotts.text.instructions import TABLE, Applied, interpret


@pytest.mark.parametrize(
    ("text", "factor"),
    [("speak slowly", 0.8), ("Slow", 0.8), ("a bit slower please", 0.8), ("fast", 1.25), ("Speak quickly!", 1.25)],
)
def test_pace_becomes_a_speed_factor(text: str, factor: float) -> None:
    instructed = interpret(text)
    assert instructed.speed_factor == factor
    assert instructed.refine_prompt == ""
    assert [item.control for item in instructed.applied] == ["pace"]
    assert instructed.ignored == ()


@pytest.mark.parametrize(
    ("text", "prompt", "control"),
    [
        ("laugh", "[laugh_2]", "laughter"),
        ("with laughter", "[laugh_2]", "laughter"),
        ("pause", "[break_6]", "pauses"),
        ("with more pauses", "[break_6]", "pauses"),
        ("casual", "[oral_2]", "oral style"),
        ("conversational tone", "[oral_2]", "oral style"),
        ("oral", "[oral_2]", "oral style"),
    ],
)
def test_laughter_pauses_and_oral_style_become_refine_tokens(text: str, prompt: str, control: str) -> None:
    instructed = interpret(text)
    assert instructed.refine_prompt == prompt
    assert instructed.applied == (Applied(text, control, prompt),)
    assert instructed.speed_factor == 1.0


def test_clauses_are_applied_or_ignored_one_by_one() -> None:
    instructed = interpret("Speak slowly, with laughter and sound cheerful. Casual; whisper")
    assert instructed.speed_factor == 0.8
    assert instructed.refine_prompt == "[laugh_2][oral_2]"  # TABLE order, whatever the order written
    assert [item.instruction for item in instructed.applied] == ["Speak slowly", "with laughter", "Casual"]
    assert instructed.ignored == ("sound cheerful", "whisper")
    assert instructed.report() == {
        "applied": [
            {"instruction": "Speak slowly", "control": "pace", "effect": "speed x 0.8"},
            {"instruction": "with laughter", "control": "laughter", "effect": "[laugh_2]"},
            {"instruction": "Casual", "control": "oral style", "effect": "[oral_2]"},
        ],
        "ignored": ["sound cheerful", "whisper"],
    }


@pytest.mark.parametrize(
    "text", ["don't laugh", "no pauses", "without breaks", "not so fast", "never casual", "slow but fast"]
)
def test_negated_or_contradictory_clauses_are_ignored(text: str) -> None:
    instructed = interpret(text)
    assert instructed.applied == ()
    assert instructed.ignored == (text,)
    assert (instructed.speed_factor, instructed.refine_prompt) == (1.0, "")


def test_a_control_set_twice_keeps_the_first() -> None:
    instructed = interpret("slowly, then fast")
    assert instructed.speed_factor == 0.8
    assert instructed.ignored == ("then fast",)


def test_refine_tokens_only_are_the_prompt_as_given() -> None:
    instructed = interpret(" [oral_2][laugh_0] [break_6] ")
    assert instructed.refine_prompt == "[oral_2][laugh_0][break_6]"
    assert instructed.ignored == ()
    assert [item.control for item in instructed.applied] == ["refine tokens"]


def test_anything_else_is_ignored_whole() -> None:
    instructed = interpret("Speak cheerfully.")
    assert (instructed.applied, instructed.ignored, instructed.speed_factor) == ((), ("Speak cheerfully",), 1.0)


def test_without_refine_keeps_only_the_pace() -> None:
    instructed = interpret("slowly, laugh").without_refine("refine_text is false")
    assert (instructed.speed_factor, instructed.refine_prompt) == (0.8, "")
    assert instructed.ignored == ("laugh (refine_text is false)",)


def test_every_word_names_one_control() -> None:
    words = [word for rule in TABLE for word in rule.words]
    assert len(words) == len(set(words))
