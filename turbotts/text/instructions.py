"""OpenAI's free-text ``instructions``, mapped to what ChatTTS can actually do.

ChatTTS has no instruction-following: it has a pace (the request's ``speed``) and the refine
stage's prompt tokens (``[laugh_k]``, ``[break_k]``, ``[oral_k]``), which make the refine pass
insert ``[laugh]``, ``[uv_break]`` pauses and oral fillers into the text. :func:`interpret`
cuts an instruction into clauses (at ``,``, ``.``, ``;``, ``!``, ``?``, newlines and the word
``and``) and maps each clause that names one of these plainly, through :data:`TABLE`:

==============================================  =================  =====================
a clause with the word(s)                       control            effect
==============================================  =================  =====================
slow, slowly, slower                            pace               speed x 0.8
fast, faster, quick, quickly                    pace               speed x 1.25
laugh, laughs, laughing, laughter               laughter           refine ``[laugh_2]``
pause, pauses, pausing, break, breaks           pauses             refine ``[break_6]``
casual, casually, conversational, oral, chatty  oral style         refine ``[oral_2]``
==============================================  =================  =====================

A clause with a negation (no, not, don't, without, never, less) or naming two controls, or a
control a clause before already set, is not applied: it is reported as ignored, as is every
clause that names none. The whole instruction may instead be refine tokens only
(``[oral_2][laugh_0][break_6]``): they are the refine prompt as given. Pure ``str`` -> data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """One row of :data:`TABLE`: the words that name a control, and what it becomes."""

    control: str  # pace, laughter, pauses, oral style
    words: tuple[str, ...]
    effect: str  # as reported: "speed x 0.8", "[laugh_2]"
    speed_factor: float = 1.0
    refine_token: str = ""


TABLE: tuple[Rule, ...] = (
    Rule("pace", ("slow", "slowly", "slower"), "speed x 0.8", speed_factor=0.8),
    Rule("pace", ("fast", "faster", "quick", "quickly"), "speed x 1.25", speed_factor=1.25),
    Rule("laughter", ("laugh", "laughs", "laughing", "laughter"), "[laugh_2]", refine_token="[laugh_2]"),
    Rule("pauses", ("pause", "pauses", "pausing", "break", "breaks"), "[break_6]", refine_token="[break_6]"),
    Rule("oral style", ("casual", "casually", "conversational", "oral", "chatty"), "[oral_2]", refine_token="[oral_2]"),
)
REFINE_TOKENS_RE = re.compile(r"^(?:\[(?:oral|laugh|break)_\d\])+$")
_CLAUSE_SPLIT_RE = re.compile(r"[,.;:!?\n]+|\band\b", re.IGNORECASE)
_WORD_RE = re.compile(r"[a-z']+")
_NEGATIONS = frozenset({"no", "not", "don't", "dont", "without", "never", "less", "nor", "stop"})


@dataclass(frozen=True)
class Applied:
    """A clause that was applied, and as what."""

    instruction: str
    control: str
    effect: str

    def as_dict(self) -> dict[str, str]:
        return {"instruction": self.instruction, "control": self.control, "effect": self.effect}


@dataclass(frozen=True)
class Instructed:
    """What an ``instructions`` string becomes: a pace factor, refine tokens, and what was applied or ignored."""

    speed_factor: float = 1.0
    refine_prompt: str = ""  # refine tokens, in TABLE order: "[laugh_2][break_6]"
    applied: tuple[Applied, ...] = ()
    ignored: tuple[str, ...] = ()  # the clauses not applied, as written

    def report(self) -> dict[str, Any]:
        """The JSON object the ``X-TurboTTS-Instructions`` header and the SSE ``done`` event carry."""
        return {"applied": [item.as_dict() for item in self.applied], "ignored": list(self.ignored)}

    def without_refine(self, reason: str) -> Instructed:
        """The same with its refine tokens moved to ``ignored`` (``reason`` added), for a request without refine."""
        kept = tuple(item for item in self.applied if item.control == "pace")
        dropped = tuple(f"{item.instruction} ({reason})" for item in self.applied if item.control != "pace")
        return Instructed(self.speed_factor, "", kept, self.ignored + dropped)


def interpret(instructions: str) -> Instructed:
    """Map ``instructions`` through :data:`TABLE` (see the module docstring); nothing is raised."""
    compact = re.sub(r"\s+", "", instructions)
    if REFINE_TOKENS_RE.match(compact):
        return Instructed(refine_prompt=compact, applied=(Applied(compact, "refine tokens", compact),))
    applied: list[tuple[Rule, str]] = []
    ignored: list[str] = []
    for clause in (part.strip() for part in _CLAUSE_SPLIT_RE.split(instructions)):
        if not clause:
            continue
        words = set(_WORD_RE.findall(clause.lower().replace("\u2019", "'")))
        rules = [rule for rule in TABLE if words & set(rule.words)]
        is_taken = any(rule.control == seen.control for rule in rules for seen, _ in applied)
        if len(rules) != 1 or words & _NEGATIONS or is_taken:
            ignored.append(clause)
        else:
            applied.append((rules[0], clause))
    speed_factor = 1.0
    for rule, _ in applied:
        speed_factor *= rule.speed_factor
    tokens = "".join(rule.refine_token for rule in TABLE if any(rule is seen for seen, _ in applied))
    report = tuple(Applied(clause, rule.control, rule.effect) for rule, clause in applied)
    return Instructed(speed_factor, tokens, report, tuple(ignored))
