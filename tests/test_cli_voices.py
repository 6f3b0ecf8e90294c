"""``turbotts say --reference`` and ``turbotts voices clone`` as a user runs them (real clips).

``voices clone`` runs once as a real subprocess; the other runs go through the same ``main`` in this
process (:mod:`tests.cli_runner`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.cli_runner import run_cli, run_subprocess
from tests.golden import FIXTURE_DIR
from tests.server.clips import CLIP_TEXT, RATE_HZ, speech_24k, stereo_16k_wav, wav_bytes
from turbotts import TTS, ModelSource, SamplingParams, SynthesisParams
from turbotts.server.voices.store import VoiceStore

SAY = (
    "--checkpoint",
    str(FIXTURE_DIR),
    "--greedy",
    "--skip-refine",
    "--dtype",
    "fp32",
    "--quant",
    "none",
    "--vocoder-dtype",
    "fp32",
    "--max-new-tokens",
    "12",
)


@cache
def _tts() -> TTS:
    return TTS.load(ModelSource(checkpoint=FIXTURE_DIR))


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("clips") / "clip.wav"
    path.write_bytes(stereo_16k_wav(speech_24k()))
    return path


def _greedy(reference: object = None) -> SynthesisParams:
    code = SamplingParams(greedy=True, max_new_tokens=12)
    return SynthesisParams(code=code, seed=1, refine_text=False, reference=reference)  # type: ignore[arg-type]


def test_say_with_a_reference_clip_speaks_in_its_voice(tmp_path: Path, clip: Path) -> None:
    out = tmp_path / "cloned.wav"
    result = run_cli("say", "你好。", "-o", str(out), *SAY, "--seed", "1", "--reference", str(clip),
                     "--reference-text", CLIP_TEXT)  # fmt: skip
    assert result.returncode == 0, result.stderr
    wav, rate = sf.read(out, dtype="float32")
    assert rate == RATE_HZ
    reference = _tts().reference_from_clip(clip.read_bytes(), CLIP_TEXT)
    expected = _tts().synthesize("你好。", _greedy(reference))[0]
    plain = _tts().synthesize("你好。", _greedy())[0]
    assert wav.shape == expected.shape
    np.testing.assert_allclose(wav, expected, atol=2 / 32768, rtol=0)  # PCM_16 in the file
    assert wav.shape != plain.shape or not np.allclose(wav, plain, atol=1e-3)


def test_voices_clone_prints_the_official_string_and_saves_it(tmp_path: Path, clip: Path) -> None:
    db = tmp_path / "voices.sqlite3"
    result = run_subprocess("voices", "clone", str(clip), "--text", CLIP_TEXT, "--name", "my-clip", "--voices-db",
                            str(db), "--checkpoint", str(FIXTURE_DIR))  # fmt: skip
    assert result.returncode == 0, result.stderr
    expected = _tts().reference_from_clip(clip.read_bytes(), CLIP_TEXT).spk_smp
    assert result.stdout.strip() == expected
    assert f"saved voice 'my-clip' in {db}" in result.stderr
    store = VoiceStore(db)
    try:
        saved = store.get("my-clip")
        assert saved.kind == "reference" and saved.spk_smp == expected and saved.transcript == CLIP_TEXT
    finally:
        store.close()
    again = run_cli("voices", "clone", str(clip), "--text", CLIP_TEXT, "--name", "my-clip", "--voices-db", str(db),
                    "--checkpoint", str(FIXTURE_DIR))  # fmt: skip
    assert again.returncode == 2 and "already exists" in again.stderr


def test_bad_clips_and_flags_exit_2_with_a_message(tmp_path: Path, clip: Path) -> None:
    short = tmp_path / "short.wav"
    short.write_bytes(wav_bytes(speech_24k()[: RATE_HZ // 2], RATE_HZ))
    garbage = tmp_path / "garbage.m4a"
    garbage.write_bytes(b"not audio at all" * 100)
    out = str(tmp_path / "x.wav")
    cases = [
        (("say", "hi", "-o", out, *SAY, "--reference", str(clip)), "needs --reference-text"),
        (("say", "hi", "-o", out, *SAY, "--reference-text", "words"), "needs --reference"),
        (("say", "hi", "-o", out, *SAY, "--reference", str(tmp_path / "none.wav"), "--reference-text", "w"),
         "does not exist"),
        (("voices", "clone", str(short), "--text", "hi", "--checkpoint", str(FIXTURE_DIR)), "must last between"),
        (("voices", "clone", str(garbage), "--text", "hi", "--checkpoint", str(FIXTURE_DIR)), "cannot be decoded"),
        (("voices", "clone", str(clip), "--text", " ", "--checkpoint", str(FIXTURE_DIR)), "needs --text"),
    ]  # fmt: skip
    for args, message in cases:
        result = run_cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)
