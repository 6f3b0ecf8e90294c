"""The SSML subset, read by ``parse_ssml`` and cut by the one segmenter: what each element produces, and where
errors point."""

from __future__ import annotations

import pytest

from turbotts.errors import SSMLError
from turbotts.text.segmenter import split_input
from turbotts.text.ssml import is_ssml, parse_ssml
from turbotts.text.utterances import Pause, SpeechItem, Utterance


def segments(document: str) -> list[SpeechItem]:
    return split_input(document, is_ssml=True)


def said(document: str) -> str:
    return " ".join(item.text for item in segments(document) if isinstance(item, Utterance))


def test_breaks_are_pauses_between_segments() -> None:
    items = segments('<speak>A b.<break time="250ms"/>C d.<break strength="strong"/><break/>E.</speak>')
    assert items == [Utterance("A b."), Pause(250), Utterance("C d."), Pause(750), Pause(400), Utterance("E.")]
    assert segments('<speak>a<break time="1.5s"/>b</speak>')[1] == Pause(1500)


@pytest.mark.parametrize(
    ("rate", "expected"),
    [("x-slow", 0.5), ("slow", 0.75), ("medium", 1.0), ("fast", 1.25), ("x-fast", 2.0), ("80%", 0.8),
     ("+20%", 1.2), ("-50%", 0.5), ("1.5", 1.5)],
)  # fmt: skip
def test_prosody_rates(rate: str, expected: float) -> None:
    items = segments(f'<speak>a <prosody rate="{rate}">b</prosody> c</speak>')
    rates = [item.rate for item in items if isinstance(item, Utterance)]
    assert rates == ([1.0, expected, 1.0] if expected != 1.0 else [1.0])
    assert pytest.approx(rates[len(rates) // 2]) == expected


def test_nested_rates_multiply_and_are_bounded() -> None:
    items = segments('<speak><prosody rate="x-fast"><prosody rate="150%">fast.</prosody></prosody></speak>')
    assert items == [Utterance("fast.", 3.0)]
    with pytest.raises(SSMLError, match=r"outside 0\.25\.\.4\.0") as caught:
        segments('<speak><prosody rate="x-fast"><prosody rate="300%">too fast</prosody></prosody></speak>')
    assert (caught.value.element, caught.value.line, caught.value.column) == ("prosody", 1, 31)


@pytest.mark.parametrize(
    ("markup", "expected"),
    [
        ('<say-as interpret-as="characters">AB1</say-as>', "A B one"),
        ('<say-as interpret-as="spell-out">ok</say-as>', "o k"),
        ('<say-as interpret-as="digits">2024</say-as>', "two zero two four"),
        ('<say-as interpret-as="cardinal">-1,500</say-as>', "minus one thousand five hundred"),
        ('<say-as interpret-as="cardinal">3.25</say-as>', "three point two five"),
        ('<say-as interpret-as="date">2024-05-01</say-as>', "May first, twenty twenty four"),
        ('<say-as interpret-as="date" format="dmy">01/05/2024</say-as>', "May first, twenty twenty four"),
        ('<say-as interpret-as="date">05/01/2024</say-as>', "May first, twenty twenty four"),
        ('<say-as interpret-as="telephone">+44 20 7946</say-as>', "plus four four, two zero, seven nine four six"),
        ('<sub alias="Doctor">Dr.</sub>', "Doctor"),
        ('<phoneme ph="tomahto">tomato</phoneme>', "tomahto"),
    ],
)
def test_say_as_sub_and_phoneme_render_the_spoken_text(markup: str, expected: str) -> None:
    assert said(f"<speak>{markup}</speak>") == expected


def test_chinese_say_as_reads_in_chinese() -> None:
    document = (
        '<speak>电话<say-as interpret-as="telephone">110</say-as>，共<say-as interpret-as="cardinal">42</say-as>人'
        "</speak>"
    )
    assert said(document) == "电话一一零，共四十二人"


def test_p_and_s_cut_segments_and_text_between_them_stays() -> None:
    items = segments("<speak>Intro <p>Para one. <s>Sentence.</s> Tail.</p> End.</speak>")
    assert [item.text for item in items if isinstance(item, Utterance)] == [
        "Intro", "Para one.", "Sentence.", "Tail.", "End."
    ]  # fmt: skip


def test_parse_reads_whole_runs_and_the_segmenter_cleans_and_cuts_them() -> None:
    """parse_ssml only reads: the text between boundaries comes out whole; split_input cuts it as plain text."""
    document = '<speak><prosody rate="slow">One two three.  Four five six. Seven &amp; eight 😀!</prosody> [laugh]'
    assert parse_ssml(document + "</speak>") == [
        Utterance("One two three. Four five six. Seven & eight 😀!", 0.75), Utterance("[laugh]")
    ]  # fmt: skip
    assert split_input(document + "</speak>", max_segment_chars=16) == [
        Utterance("One two three.", 0.75), Utterance("Four five six.", 0.75), Utterance("Seven & eight!", 0.75)
    ]  # fmt: skip


def test_namespaces_xml_lang_and_control_tokens_are_kept_working() -> None:
    document = (
        '<?xml version="1.0"?><speak version="1.0" xmlns="http://www.w3.org/2001/10/synthesis" xml:lang="en-US">'
        "Hello [uv_break] there [laugh].</speak>"
    )
    assert said(document) == "Hello [uv_break] there [laugh]."


def test_is_ssml_needs_a_speak_root_or_an_xml_declaration() -> None:
    assert is_ssml("  <speak>hi</speak>") and is_ssml("<speak\nversion='1.0'>hi</speak>") and is_ssml("<speak/>")
    assert not is_ssml("<speaker>hi</speaker>") and not is_ssml("say <speak>")
    assert is_ssml('<?xml version="1.0"?><speak>hi</speak>') and is_ssml('\ufeff\n <?xml version="1.0"?>\n<speak/>')
    assert is_ssml("\ufeff<speak>hi</speak>")
    assert not is_ssml("<?xmlfoo?>") and not is_ssml("a <?xml version='1.0'?>")


W3C = (
    '\ufeff<?xml version="1.0" encoding="UTF-8"?>\n'
    '<speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis"\n'
    '       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xml:lang="en-US">\n'
    "  <p>Hello there.</p>\n</speak>"
)


def test_a_w3c_document_says_only_its_text() -> None:
    assert split_input(W3C) == [Utterance("Hello there.")] == split_input("<speak><p>Hello there.</p></speak>")
    prefixed = '<?xml version="1.0"?><s:speak xmlns:s="http://www.w3.org/2001/10/synthesis"><s:p>Hi.</s:p></s:speak>'
    assert split_input(prefixed) == [Utterance("Hi.")]


def test_voice_switches_the_voice_of_its_content_and_the_innermost_wins() -> None:
    document = (
        '<speak>Narrator. <voice name="nova">Hi, Bob. <voice name="alloy*0.5+echo*0.5">Hi!</voice> Fine.</voice>'
        '<voice name="onyx"><s>One.</s><break time="100ms"/><s>Two.</s></voice>End.</speak>'
    )
    assert segments(document) == [
        Utterance("Narrator."), Utterance("Hi, Bob.", voice="nova"), Utterance("Hi!", voice="alloy*0.5+echo*0.5"),
        Utterance("Fine.", voice="nova"), Utterance("One.", voice="onyx"), Pause(100),
        Utterance("Two.", voice="onyx"), Utterance("End."),
    ]  # fmt: skip
    # two voices in a row are two segments even with the same rate and no <s>; rates keep working inside
    two = '<speak><voice name="a">x</voice><voice name="b"><prosody rate="50%">y</prosody></voice></speak>'
    assert segments(two) == [Utterance("x", voice="a"), Utterance("y", 0.5, "b")]


def test_emphasis_is_ignored_and_its_content_spoken() -> None:
    assert segments('<speak>It is <emphasis level="strong">very</emphasis> good.</speak>') == [
        Utterance("It is very good.")
    ]


@pytest.mark.parametrize(
    ("document", "element", "line", "column", "words"),
    [
        ("<speak>a<b>c</speak>", "b", 1, 15, "mismatched tag"),
        ("<speak>\n<s>a</s>\n<audio src='x.wav'>b</audio></speak>", "audio", 3, 1, "fetches no audio files"),
        ("<speak>\n<mark name='m'/></speak>", "mark", 2, 1, "not supported; use <speak>"),
        ("<speak><voice>b</voice></speak>", "voice", 1, 8, 'needs name="'),
        ("<speak><voice gender='female'>b</voice></speak>", "voice", 1, 8, "attribute 'gender'"),
        ("<speak xmlns:m='urn:x'><m:express-as>b</m:express-as></speak>", "express-as", 1, 24, "namespace 'urn:x'"),
        ('\n <?xml version="1.0"?>\n<speak>a<b>c</speak>', "b", 3, 15, "mismatched tag"),
        ('\ufeff<?xml version="1.0"?><speak><audio/></speak>', "audio", 1, 30, "not supported"),
        ('<speak><break time="fast"/></speak>', "break", 1, 8, '"500ms"'),
        ("<speak><break>text</break></speak>", "break", 1, 8, "no content"),
        ('<speak><say-as interpret-as="date">2024-13-01</say-as></speak>', "say-as", 1, 8, "not a date"),
        ("<speak><sub>x</sub></speak>", "sub", 1, 8, "alias"),
        ('<speak><sub alias="a"><s>x</s></sub></speak>', "sub", 1, 8, "text only"),
        ('<!DOCTYPE speak SYSTEM "http://example.com/x.dtd"><speak>a</speak>', "!DOCTYPE", 1, 50, "DTDForbidden"),
        ("", None, 1, 1, "no element found"),
    ],
)
def test_errors_name_the_element_and_position(
    document: str, element: str | None, line: int, column: int, words: str
) -> None:
    with pytest.raises(SSMLError) as caught:
        parse_ssml(document)
    error = caught.value
    assert (error.element, error.line, error.column) == (element, line, column)
    assert words in str(error) and f"line {line}, column {column}" in str(error)


def test_limits_on_depth_and_total_silence() -> None:
    deep = "<speak>" + "<s>" * 40 + "x" + "</s>" * 40 + "</speak>"
    with pytest.raises(SSMLError, match="nest more than 32"):
        parse_ssml(deep)
    many = "<speak>" + '<break time="10s"/>' * 31 + "x</speak>"
    with pytest.raises(SSMLError, match="more than 300 s"):
        parse_ssml(many)
