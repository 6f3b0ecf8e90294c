"""The one segmenter: plain text and SSML in, utterances and pauses out; and no other code cuts request text.

That the server, ``say --captions`` and the Python API give the same segments for the same input is
tested end to end in ``tests/server/test_one_segmenter.py``.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from turbotts.errors import InvalidInputError, SSMLError
from turbotts.text.segment import DEFAULT_MAX_SEGMENT_CHARS, SentenceBuffer
from turbotts.text.segmenter import split_input, split_plain
from turbotts.text.utterances import Pause, Utterance

PACKAGE = Path(__file__).resolve().parents[2] / "turbotts"
SEGMENTER = "turbotts.text.segmenter"
#: where each cutting function is defined (segment.py's SentenceBuffer cuts streamed text with split_text)
DEFINED_IN = {"split_text": "turbotts.text.segment", "parse_ssml": "turbotts.text.ssml"}
#: parameters that carry a segment length; their default is DEFAULT_MAX_SEGMENT_CHARS or none
LENGTH_PARAMETERS = {"max_segment_chars", "max_chars", "max_units"}


def texts(items: list[Utterance | Pause]) -> list[str]:
    return [item.text for item in items if isinstance(item, Utterance)]


def test_plain_text_is_cleaned_then_cut_and_packed() -> None:
    items = split_input("Hello <b>world</b> 😀!! How are you? [laugh]", max_segment_chars=12)
    assert items == [Utterance("Hello"), Utterance("world!"), Utterance("How are"), Utterance("you? [laugh]")]
    assert split_plain("Hello <b>world</b> 😀!! How are you? [laugh]", 12, rate=2.0)[0] == Utterance("Hello", 2.0)


def test_ssml_is_read_when_it_starts_with_speak_or_when_told() -> None:
    document = '<speak>Hi there.<break time="1s"/>Bye now.</speak>'
    expected = [Utterance("Hi there."), Pause(1000), Utterance("Bye now.")]
    assert split_input(document) == expected
    assert split_input(document, is_ssml=True) == expected
    assert split_input(document, is_ssml=False) == [Utterance("Hi there. Bye now.")]  # tags removed as markup
    with pytest.raises(SSMLError, match="not well-formed"):
        split_input("Hi there.", is_ssml=True)


@pytest.mark.parametrize(
    ("text", "words"),
    [("!!! 😀 [laugh]", "the input has nothing to say"), ('<speak><break time="1s"/>...</speak>', "the SSML has")],
)
def test_nothing_to_say_is_refused(text: str, words: str) -> None:
    with pytest.raises(InvalidInputError, match=words):
        split_input(text)
    assert split_plain("!!! 😀") == []  # a streamed sentence with nothing to say is skipped, not refused


def test_the_default_length_is_one_constant_everywhere() -> None:
    from turbotts.api import TTS
    from turbotts.server.settings import ServerSettings

    sentence = "This sentence is one of a much longer text, and it goes on a while. "
    items = split_input(sentence * 6)
    assert items == split_input(sentence * 6, max_segment_chars=DEFAULT_MAX_SEGMENT_CHARS)
    assert len(items) > 1 and all(len(text) <= DEFAULT_MAX_SEGMENT_CHARS for text in texts(items))
    assert ServerSettings.model_fields["max_segment_chars"].default == DEFAULT_MAX_SEGMENT_CHARS
    assert inspect.signature(TTS.synthesize_long).parameters["max_segment_chars"].default == DEFAULT_MAX_SEGMENT_CHARS
    assert SentenceBuffer().max_chars == DEFAULT_MAX_SEGMENT_CHARS


def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = ast.parse(path.read_text("utf-8"))
    return found


def _names_used(tree: ast.Module) -> set[str]:
    """Every name a module imports, reads or reads as an attribute (``ssml.parse_ssml`` too)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def test_only_the_segmenter_cuts_request_text() -> None:
    """split_text and parse_ssml are called by the segmenter and nowhere else (besides where they are defined)."""
    for function, home in DEFINED_IN.items():
        users = {module for module, tree in _modules().items() if function in _names_used(tree)}
        assert SEGMENTER in users
        assert users - {SEGMENTER, home} == set(), f"{function} is called outside the segmenter"


def _numbers_for_lengths(module: str, tree: ast.Module) -> list[str]:
    """Where ``module`` writes a segment length as a number: a parameter default, a ``Field(default=...)``,
    or a constant named ``*SEGMENT_CHARS`` other than the one."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            positional = node.args.posonlyargs + node.args.args
            pairs = zip(positional[len(positional) - len(node.args.defaults) :], node.args.defaults, strict=True)
            pairs_kw = zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)
            found += [f"{module}.{node.name}({arg.arg})" for arg, default in [*pairs, *pairs_kw]
                      if arg.arg in LENGTH_PARAMETERS and isinstance(default, ast.Constant)]  # fmt: skip
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
            if name in LENGTH_PARAMETERS and isinstance(node.value, ast.Call):
                found += [f"{module}.{name}" for keyword in node.value.keywords
                          if keyword.arg == "default" and isinstance(keyword.value, ast.Constant)]  # fmt: skip
            if "SEGMENT_CHARS" in name and name != "DEFAULT_MAX_SEGMENT_CHARS":
                found.append(f"{module}.{name}")
        elif isinstance(node, ast.Assign):
            found += [f"{module}.{t.id}" for t in node.targets if isinstance(t, ast.Name) and "SEGMENT_CHARS" in t.id
                      and t.id != "DEFAULT_MAX_SEGMENT_CHARS"]  # fmt: skip
    return found


def test_no_segment_length_default_is_written_as_a_number() -> None:
    """A segment length defaults to DEFAULT_MAX_SEGMENT_CHARS (or must be given), never to a literal like 120."""
    assert [where for module, tree in _modules().items() for where in _numbers_for_lengths(module, tree)] == []
