"""`turbotts say --captions`: the command writes a WAV and a WebVTT or SRT file that parse back.

The command runs in this process (:mod:`tests.cli_runner`); ``tests/test_cli.py`` runs ``say`` as a subprocess.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import srt
import webvtt

from tests.cli_runner import CliRun, run_cli

# about 200 characters: two segments at the server's 120-character limit (the last two sentences packed)
TEXT = (
    "The first sentence is here and it has 12 words or so in it, more or less. "
    "The second sentence follows it closely and is about as long as the first. "
    "A third one closes the text."
)


def say(tmp_path: Path, captions: str, *extra: str) -> tuple[Path, Path, CliRun]:
    wav, cues = tmp_path / "out.wav", tmp_path / captions
    result = run_cli("say", TEXT, "-o", str(wav), "--captions", str(cues), "--load-format", "dummy",
                     "--max-new-tokens", "12", "--seed", "3", "--skip-refine", *extra)  # fmt: skip
    return wav, cues, result


def check_cues(cues: list[tuple[float, float, str]], wav: Path) -> None:
    audio, rate = sf.read(str(wav), dtype="float32")
    assert len(cues) == 2
    assert cues[0][0] == 0.0
    assert cues[0][1] == cues[1][0]  # captions tile the audio
    assert abs(cues[-1][1] - len(audio) / rate) <= 0.0005  # the last ends with the file (to the millisecond)
    assert cues[0][2].startswith("The first sentence is here and it has twelve words")  # as spoken
    assert cues[1][2].endswith("as long as the first. A third one closes the text.")  # packed while they fit


def test_say_writes_webvtt_that_parses_back(tmp_path: Path) -> None:
    wav, path, result = say(tmp_path, "out.vtt")
    assert result.returncode == 0, result.stderr
    check_cues([(_vtt_s(c.start), _vtt_s(c.end), c.text) for c in webvtt.read(str(path))], wav)


def _vtt_s(clock: str) -> float:
    hours, minutes, seconds = clock.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def test_say_writes_srt_that_parses_back(tmp_path: Path) -> None:
    wav, path, result = say(tmp_path, "out.srt")
    assert result.returncode == 0, result.stderr
    subtitles = list(srt.parse(path.read_text(encoding="utf-8")))
    assert [s.index for s in subtitles] == [1, 2]
    check_cues([(s.start.total_seconds(), s.end.total_seconds(), s.content) for s in subtitles], wav)


@pytest.mark.parametrize("name", ["out.txt", "out"])
def test_say_refuses_an_unknown_caption_format_before_synthesis(tmp_path: Path, name: str) -> None:
    _, _, result = say(tmp_path, name)
    assert result.returncode == 2
    assert ".vtt or .srt" in result.stderr
    assert not (tmp_path / "out.wav").exists()


def test_say_reads_ssml_with_an_exact_break(tmp_path: Path) -> None:
    wav, cues = tmp_path / "ssml.wav", tmp_path / "ssml.srt"
    document = '<speak><s>Hello there.</s><break time="500ms"/><s>See you.</s></speak>'
    result = run_cli("say", document, "-o", str(wav), "--captions", str(cues), "--load-format", "dummy",
                     "--max-new-tokens", "12", "--seed", "3", "--skip-refine")  # fmt: skip
    assert result.returncode == 0, result.stderr
    first, second = srt.parse(cues.read_text(encoding="utf-8"))
    assert (first.content, second.content) == ("Hello there.", "See you.")
    assert (second.start - first.end).total_seconds() == 0.5
    audio, rate = sf.read(str(wav), dtype="int16")
    start, end = round(first.end.total_seconds() * rate), round(second.start.total_seconds() * rate)
    assert not audio[start + 24 : end - 24].any()  # silence (captions are rounded to the millisecond: 24 samples)


def test_say_refuses_bad_ssml_with_exit_2_naming_the_element(tmp_path: Path) -> None:
    result = run_cli("say", "<speak><audio src='x'/></speak>", "-o", str(tmp_path / "x.wav"), "--load-format", "dummy")
    assert result.returncode == 2
    assert "SSML <audio> at line 1, column 8" in result.stderr


DIALOGUE = (
    '<?xml version="1.0" encoding="UTF-8"?><speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis" '
    'xml:lang="en-US"><voice name="nova">Hello there.</voice><voice name="onyx">See you.</voice></speak>'
)


def say_document(tmp_path: Path, name: str, document: str, *extra: str) -> np.ndarray:
    wav = tmp_path / f"{name}.wav"
    result = run_cli("say", document, "-o", str(wav), "--load-format", "dummy", "--max-new-tokens", "12",
                     "--seed", "3", "--skip-refine", *extra)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return sf.read(str(wav), dtype="int16")[0]


def test_say_speaks_a_voice_dialogue_in_order_and_names_the_voices(tmp_path: Path) -> None:
    vtt, srt_path = tmp_path / "d.vtt", tmp_path / "d.srt"
    dialogue = say_document(tmp_path, "d", DIALOGUE, "--captions", str(vtt))
    assert np.array_equal(say_document(tmp_path, "d2", DIALOGUE, "--captions", str(srt_path)), dialogue)
    first = say_document(tmp_path, "a", '<speak><voice name="nova">Hello there.</voice></speak>')
    second = say_document(tmp_path, "b", '<speak><voice name="onyx">See you.</voice></speak>')
    assert np.array_equal(dialogue, np.concatenate([first, second]))  # each voice as alone, in order, no crossfade
    assert not np.array_equal(dialogue, say_document(tmp_path, "n", DIALOGUE.replace("onyx", "nova")))
    assert [(c.voice, c.text) for c in webvtt.read(str(vtt))] == [("nova", "Hello there."), ("onyx", "See you.")]
    assert "<v nova>Hello there." in vtt.read_text(encoding="utf-8")
    cues = list(srt.parse(srt_path.read_text(encoding="utf-8")))
    assert [c.content for c in cues] == ["nova: Hello there.", "onyx: See you."]
    assert round(cues[0].end.total_seconds() * 24000) == pytest.approx(first.size, abs=12)  # to the millisecond


def test_say_mixes_voices_and_refuses_a_saved_name(tmp_path: Path) -> None:
    mixed = say_document(tmp_path, "m", '<speak><voice name="nova*0.5+onyx*0.5">Hello there.</voice></speak>')
    assert mixed.size > 0
    assert not np.array_equal(
        mixed, say_document(tmp_path, "o", '<speak><voice name="nova">Hello there.</voice></speak>')
    )
    result = run_cli("say", '<speak><voice name="my-saved">Hi.</voice></speak>', "-o", str(tmp_path / "x.wav"),
                     "--load-format", "dummy")  # fmt: skip
    assert result.returncode == 2 and "say knows the built-in voices" in result.stderr
    assert not (tmp_path / "x.wav").exists()
