"""A missing espeak-ng skips the real-speech watermark tests on a laptop but fails them in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ESPEAK_TESTS = "tests/guard/test_watermark_codecs.py"


def _run_without_espeak(**env: str) -> subprocess.CompletedProcess[str]:
    """pytest on the espeak-ng tests with a PATH that has no espeak-ng."""
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "TURBOTTS_REQUIRE_ESPEAK")}
    clean["PATH"] = str(Path(sys.executable).parent)
    clean["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "espeak", ESPEAK_TESTS],
        cwd=REPO, env={**clean, **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_missing_espeak_skips_with_a_reason_and_a_banner_outside_ci() -> None:
    result = _run_without_espeak()
    assert result.returncode == 0, result.stdout[-2000:]
    assert "7 skipped" in result.stdout and "passed" not in result.stdout
    assert "real-speech watermark tests SKIPPED: espeak-ng is not on PATH" in result.stdout


def test_missing_espeak_fails_when_required() -> None:
    for env in ({"TURBOTTS_REQUIRE_ESPEAK": "1"}, {"CI": "true"}):
        result = _run_without_espeak(**env)
        assert result.returncode == 1, result.stdout[-2000:]
        assert "skipped" not in result.stdout
        assert "required because CI or TURBOTTS_REQUIRE_ESPEAK=1 is set" in result.stdout
