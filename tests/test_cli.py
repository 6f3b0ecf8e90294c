"""The `turbotts` command as a user runs it (real WAV files).

One subprocess per command proves the real entry point (``python -m turbotts``); the other
checks run the same ``main`` in this process (:mod:`tests.cli_runner`), which spares each
one the seconds a fresh interpreter spends importing torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.cli_runner import run_cli, run_subprocess
from tests.golden import FIXTURE_DIR, case, tensors
from turbotts.model.speaker import decode_voice

ZH = "你好，欢迎使用语音合成。"


def test_say_on_the_fixture_checkpoint_writes_24khz_wav(tmp_path: Path) -> None:
    """The real entry point, end to end."""
    out = tmp_path / "hello.wav"
    result = run_subprocess("say", ZH, "-o", str(out), "--checkpoint", str(FIXTURE_DIR), "--greedy", "--skip-refine",
                            "--dtype", "fp32", "--max-new-tokens", "30", "--seed", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    audio, rate = sf.read(str(out), dtype="float32")
    assert rate == 24000
    assert len(audio) == 512 * 30 - 256  # random weights never stop early with greedy on this text


def test_say_greedy_is_the_official_greedy_audio(tmp_path: Path) -> None:
    """`say --greedy` on the fixture equals the official package's near-greedy (temperature 1e-6) waveform
    of golden case j1, to parity tolerance plus the 16-bit rounding of the WAV file."""
    golden = tensors("j1_e2e_decoder")["wavs_unstripped"][0].numpy()
    text = case("j1_e2e_decoder")["inputs"]["texts"][0]
    out = tmp_path / "greedy.wav"
    result = run_cli("say", text, "-o", str(out), "--checkpoint", str(FIXTURE_DIR), "--greedy", "--skip-refine",
                     "--max-new-tokens", "40", "--dtype", "fp32", "--quant", "none",
                     "--vocoder-dtype", "fp32")  # fmt: skip
    assert result.returncode == 0, result.stderr
    audio, rate = sf.read(str(out), dtype="float32")
    assert rate == 24000 and audio.shape == golden.shape
    np.testing.assert_allclose(audio, golden, rtol=0, atol=1e-4 + 1 / 32768)


def test_say_on_dummy_weights_with_refine(tmp_path: Path) -> None:
    out = tmp_path / "dummy.wav"
    result = run_cli("say", "hello world. 2 apples!", "-o", str(out), "--load-format", "dummy", "--dummy-size", "tiny",
                     "--max-new-tokens", "12", "--seed", "3")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "random dummy-tiny weights" in result.stderr  # the warning reaches the user
    audio, rate = sf.read(str(out), dtype="float32")
    assert rate == 24000 and 0 < len(audio) <= 512 * 12 - 256


def test_voices_random_is_deterministic_and_decodes() -> None:
    first = run_subprocess("voices", "random", "--seed", "5")  # the real entry point
    second = run_cli("voices", "random", "--seed", "5")
    other = run_cli("voices", "random", "--seed", "6")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout != other.stdout
    assert decode_voice(first.stdout.strip(), 768).shape == (768,)  # official statistics are 768 wide


def test_init_checkpoint_then_say(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    created = run_subprocess("init-checkpoint", str(root), "--size", "tiny", "--seed", "9")  # the real entry point
    assert created.returncode == 0, created.stderr
    assert (root / "asset" / "gpt" / "model.safetensors").is_file()
    out = tmp_path / "x.wav"
    result = run_cli("say", "hello", "-o", str(out), "--checkpoint", str(root), "--skip-refine",
                     "--max-new-tokens", "5", "--seed", "2")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert sf.info(str(out)).samplerate == 24000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("say", "hi", "--checkpoint", "/does/not/exist"), "does not exist"),
        (("say", "hi", "--load-format", "dummy", "--dummy-size", "huge"), "dummy-size"),
        (("say", "hi", "--load-format", "dummy", "--temperature", "-1"), "temperature"),
        (("say", "hi", "--load-format", "dummy", "--voice", "not a voice"), "base16384"),
        (("say", "!!!", "--load-format", "dummy", "--skip-refine"), "nothing to say"),
        (("init-checkpoint", "/tmp/x", "--size", "medium"), "--size"),
    ],
)
def test_user_errors_exit_2_with_a_message(args: tuple[str, ...], message: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_without_the_hub_say_stops_fast_and_explains_dummy_and_local_options() -> None:
    result = run_cli("say", "hi")
    assert result.returncode == 2
    assert "--load-format dummy" in result.stderr and "--checkpoint DIR" in result.stderr


def test_say_on_full_size_dummy_weights(tmp_path: Path) -> None:
    out = tmp_path / "full.wav"
    result = run_cli("say", ZH, "-o", str(out), "--load-format", "dummy", "--dummy-size", "full", "--skip-refine",
                     "--max-new-tokens", "6", "--seed", "1", "--greedy")  # fmt: skip
    assert result.returncode == 0, result.stderr
    audio, rate = sf.read(str(out), dtype="float32")
    assert rate == 24000 and 0 < len(audio) <= 512 * 6 - 256


@pytest.mark.parametrize(("dtype", "quant"), [("bf16", "none"), ("fp32", "int8")])
def test_say_in_other_precisions(tmp_path: Path, dtype: str, quant: str) -> None:
    out = tmp_path / f"{dtype}-{quant}.wav"
    result = run_cli("say", "hello world", "-o", str(out), "--checkpoint", str(FIXTURE_DIR), "--skip-refine",
                     "--max-new-tokens", "8", "--seed", "1", "--dtype", dtype, "--quant", quant)  # fmt: skip
    assert result.returncode == 0, result.stderr
    audio, rate = sf.read(str(out), dtype="float32")
    assert rate == 24000 and 0 < len(audio) <= 512 * 8 - 256


def test_download_without_the_hub_fails_fast_with_advice(tmp_path: Path) -> None:
    """The real entry point, with the hub switched off by its own environment variable."""
    result = run_subprocess("download", "--dir", str(tmp_path / "ChatTTS"), timeout=60)
    assert result.returncode == 2
    assert "2Noise/ChatTTS" in result.stderr and "--load-format dummy" in result.stderr
    assert "Traceback" not in result.stderr


def test_download_reuses_a_complete_checkpoint_without_network() -> None:
    from turbotts.model.download import download_official

    assert download_official(FIXTURE_DIR).root == FIXTURE_DIR.resolve()


def test_say_refuses_an_unknown_vocoder_dtype_before_synthesis(tmp_path: Path) -> None:
    out = tmp_path / "x.wav"
    result = run_cli("say", "hello", "-o", str(out), "--load-format", "dummy", "--vocoder-dtype", "fp64")
    assert result.returncode == 2 and "--vocoder-dtype must be one of" in result.stderr
    assert not out.exists()
