"""`turbotts watermark detect` on files the model made and a watermark was embedded into."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

from tests.guard.watermark_signals import speech_like
from turbotts.guard.watermark import Payload, embed

KEY = bytes.fromhex("ab" * 32)


def detect(path: Path, key_hex: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TURBOTTS_WATERMARK_KEY": key_hex}
    return subprocess.run(
        [sys.executable, "-m", "turbotts", "watermark", "detect", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_detect_reports_the_payload_and_exit_codes(tmp_path: Path) -> None:
    audio = speech_like(4.0, seed=3)
    payload = Payload.for_request(7, "request-xyz")
    marked = tmp_path / "marked.wav"
    sf.write(str(marked), embed(audio, KEY, payload), 24000, subtype="PCM_16")
    found = detect(marked, "ab" * 32)
    assert found.returncode == 0, found.stderr
    assert "7" in found.stdout and f"{payload.request_hash:04x}" in found.stdout.lower()
    clean = tmp_path / "clean.wav"
    sf.write(str(clean), audio.astype(np.float32), 24000, subtype="PCM_16")
    assert detect(clean, "ab" * 32).returncode == 1
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"not audio at all")
    assert detect(garbage, "ab" * 32).returncode == 2
