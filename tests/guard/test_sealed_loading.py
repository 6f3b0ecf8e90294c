"""Sealed checkpoints through the real CLI and loader: decrypt in memory, verify, refuse tampering."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.golden import FIXTURE_DIR
from turbotts import TTS, CheckpointError, ModelSource, SamplingParams, SynthesisParams

KEY_HEX = "11" * 32


def seal(tmp_path: Path) -> tuple[Path, Path]:
    out, signing = tmp_path / "sealed", tmp_path / "keys" / "sign.pem"
    signing.parent.mkdir()
    env = {**os.environ, "SEAL_KEY": KEY_HEX}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "turbotts",
            "seal",
            str(FIXTURE_DIR),
            str(out),
            "--key-env",
            "SEAL_KEY",
            "--signing-key",
            str(signing),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return out, signing.parent / "sign.pem.pub"


def test_sealed_checkpoint_loads_in_memory_and_synthesizes_like_the_plain_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, public = seal(tmp_path)
    assert not list(out.rglob("*.safetensors")), "plaintext weights were written"
    monkeypatch.setenv("SEAL_KEY", KEY_HEX)
    params = SynthesisParams(code=SamplingParams(greedy=True, max_new_tokens=12), refine_text=False, seed=1)
    sealed = TTS.load(ModelSource(checkpoint=out, sealed_key_env="SEAL_KEY", public_key=public))
    plain = TTS.load(ModelSource(checkpoint=FIXTURE_DIR))
    np.testing.assert_array_equal(sealed.synthesize("你好", params)[0], plain.synthesize("你好", params)[0])


def test_tampered_sealed_file_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, public = seal(tmp_path)
    target = out / "asset" / "Vocos.safetensors.sealed"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    monkeypatch.setenv("SEAL_KEY", KEY_HEX)
    with pytest.raises(CheckpointError, match=r"Vocos\.safetensors"):
        TTS.load(ModelSource(checkpoint=out, sealed_key_env="SEAL_KEY", public_key=public))


def test_wrong_key_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, public = seal(tmp_path)
    monkeypatch.setenv("SEAL_KEY", "22" * 32)
    with pytest.raises(CheckpointError, match=r"manifest\.json says the checkpoint was sealed with another AES key"):
        TTS.load(ModelSource(checkpoint=out, sealed_key_env="SEAL_KEY", public_key=public))


def test_sealed_source_needs_a_public_key() -> None:
    with pytest.raises(CheckpointError, match="public-key"):
        ModelSource(checkpoint=FIXTURE_DIR, sealed_key_env="SEAL_KEY")
