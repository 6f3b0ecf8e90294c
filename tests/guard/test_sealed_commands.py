"""Sealed and signed checkpoints through the commands a user runs: seal, sign, say, voices, serve.

``seal``, ``sign`` and ``serve`` run as real subprocesses (``serve`` on loopback HTTP): the flags
(--key-env, --public-key), their environment variables and the serve config file all reach the
loader, and the key itself never reaches a log. ``say`` and ``voices`` run the same ``main`` in this
process (:mod:`tests.cli_runner`, log records on its stderr); ``tests/test_cli.py`` runs ``say`` as
a subprocess.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.cli_runner import CliRun, run_cli, run_subprocess
from tests.golden import FIXTURE_DIR
from tests.serve_process import serving

KEY_HEX = "5a" * 32
ENV = {"SEAL_KEY": KEY_HEX}
SAY = ("say", "你好，欢迎使用语音合成。", "--greedy", "--skip-refine", "--max-new-tokens", "20", "--seed", "1",
       "--dtype", "fp32")  # fmt: skip


def say_cli(*args: str, env: dict[str, str] | None = None) -> CliRun:
    return run_cli(*SAY, *args, env={**ENV, **(env or {})})


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The fixture checkpoint sealed by ``turbotts seal`` (a subprocess): (sealed directory, public key)."""
    root = tmp_path_factory.mktemp("sealed")
    signing_key = root / "signer.pem"
    result = run_subprocess(
        "seal", str(FIXTURE_DIR), str(root / "out"), "--key-env", "SEAL_KEY", "--signing-key", str(signing_key), env=ENV
    )
    assert result.returncode == 0, result.stderr
    public = Path(f"{signing_key}.pub")
    # the printed command is the one that works (checked by running it below)
    assert f"--checkpoint {root / 'out'} --key-env SEAL_KEY --public-key {public}" in result.stdout
    assert KEY_HEX not in result.stdout + result.stderr
    return root / "out", public


def _say(tmp_path: Path, name: str, *args: str, env: dict[str, str] | None = None) -> np.ndarray:
    out = tmp_path / f"{name}.wav"
    result = say_cli("-o", str(out), *args, env=env)
    assert result.returncode == 0, result.stderr
    assert KEY_HEX not in result.stdout + result.stderr
    audio, rate = sf.read(str(out), dtype="int16")
    assert rate == 24000 and audio.size == 512 * 20 - 256  # greedy on random weights never stops early
    return np.asarray(audio)


def test_say_from_a_sealed_checkpoint_equals_the_plain_one(tmp_path: Path, sealed: tuple[Path, Path]) -> None:
    out, public = sealed
    plain = _say(tmp_path, "plain", "--checkpoint", str(FIXTURE_DIR))
    by_flags = _say(tmp_path, "flags", "--checkpoint", str(out), "--key-env", "SEAL_KEY", "--public-key", str(public))
    by_env = _say(
        tmp_path,
        "env",
        "--checkpoint",
        str(out),
        env={"TURBOTTS_KEY_ENV": "SEAL_KEY", "TURBOTTS_PUBLIC_KEY": str(public)},
    )
    np.testing.assert_array_equal(by_flags, plain)
    np.testing.assert_array_equal(by_env, plain)


def test_voices_random_reads_a_sealed_checkpoint(sealed: tuple[Path, Path]) -> None:
    out, public = sealed
    sealed_voice = run_cli("voices", "random", "--seed", "3", "--checkpoint", str(out), "--key-env", "SEAL_KEY",
                           "--public-key", str(public), env=ENV)  # fmt: skip
    plain_voice = run_cli("voices", "random", "--seed", "3", "--checkpoint", str(FIXTURE_DIR))
    assert sealed_voice.returncode == 0, sealed_voice.stderr
    assert sealed_voice.stdout == plain_voice.stdout


@pytest.mark.parametrize(
    ("extra", "env_key", "message"),
    [
        ((), KEY_HEX, r"is a sealed checkpoint: pass --key-env VAR .* and --public-key PEM"),
        (("--key-env", "SEAL_KEY"), KEY_HEX, r"needs --checkpoint DIR and --public-key PEM besides --key-env"),
        (("--key-env", "SEAL_KEY", "--public-key", "PUBLIC"), "33" * 32, r"sealed with another AES key"),
        (("--key-env", "UNSET_KEY_VAR", "--public-key", "PUBLIC"), KEY_HEX, r"UNSET_KEY_VAR is not set"),
    ],
)
def test_sealed_mistakes_exit_2_naming_the_fix(
    tmp_path: Path, sealed: tuple[Path, Path], extra: tuple[str, ...], env_key: str, message: str
) -> None:
    out, public = sealed
    args = [str(public) if a == "PUBLIC" else a for a in extra]
    result = say_cli("-o", str(tmp_path / "x.wav"), "--checkpoint", str(out), *args, env={"SEAL_KEY": env_key})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert re.search(message, result.stderr), result.stderr
    assert KEY_HEX not in result.stderr


def test_serve_a_sealed_checkpoint_from_a_config_file(tmp_path: Path, sealed: tuple[Path, Path]) -> None:
    out, public = sealed
    config = tmp_path / "serve.yaml"
    config.write_text(f"checkpoint: {out}\nkey_env: SEAL_KEY\npublic_key: {public}\n")
    body = {"input": "Hello there.", "seed": 4, "response_format": "pcm", "max_new_tokens": 20}
    env = {"SEAL_KEY": KEY_HEX, "TURBOTTS_LOG_LEVEL": "debug"}
    with serving(tmp_path, "--config", str(config), env=env) as (url, log):
        response = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=300)
    assert response.status_code == 200, response.text
    assert len(response.content) // 2 > 24000 // 4
    settings_lines = [line for line in log if "settings:" in line]
    assert settings_lines and "key_env=SEAL_KEY" in settings_lines[0]
    assert not any(KEY_HEX in line or KEY_HEX.upper() in line for line in log)


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A copy of the fixture checkpoint signed in place by ``turbotts sign`` (a subprocess): (directory, public key)."""
    root = tmp_path_factory.mktemp("signed")
    plain = root / "plain"
    shutil.copytree(FIXTURE_DIR, plain)
    signing_key = root / "signer.pem"
    result = run_subprocess("sign", str(plain), "--signing-key", str(signing_key))
    assert result.returncode == 0, result.stderr
    assert f"--public-key {signing_key}.pub" in result.stdout
    return plain, Path(f"{signing_key}.pub")


def test_a_signed_plain_checkpoint_is_verified_when_a_public_key_is_given(
    tmp_path: Path, signed: tuple[Path, Path]
) -> None:
    signed_dir, public = signed
    verified = _say(tmp_path, "verified", "--checkpoint", str(signed_dir), "--public-key", str(public))
    np.testing.assert_array_equal(verified, _say(tmp_path, "unverified", "--checkpoint", str(FIXTURE_DIR)))

    plain = tmp_path / "tampered"
    shutil.copytree(signed_dir, plain)  # the module's signed copy stays intact
    tokenizer = next(plain.rglob("tokenizer.json"))
    tokenizer.write_bytes(tokenizer.read_bytes().replace(b'"', b"'", 1))  # same size, other content
    result = say_cli("-o", str(tmp_path / "x.wav"), "--checkpoint", str(plain), "--public-key", str(public))
    assert result.returncode == 2
    assert "tokenizer.json differs from the signed manifest" in result.stderr


def test_a_public_key_without_a_signed_manifest_is_refused(tmp_path: Path, signed: tuple[Path, Path]) -> None:
    _, public = signed
    result = say_cli("-o", str(tmp_path / "x.wav"), "--checkpoint", str(FIXTURE_DIR), "--public-key", str(public))
    assert result.returncode == 2
    assert "has no signed manifest.json but --public-key was given" in result.stderr
