"""A missing espeak-ng skips the real-speech watermark tests on a laptop but fails them in CI."""

from __future__ import annotations

import subprocess

from tests.required_tools import run_pytest_without_tools

ESPEAK_TESTS = "tests/guard/test_watermark_codecs.py"


def _run_without_espeak(**env: str) -> subprocess.CompletedProcess[str]:
    return run_pytest_without_tools("ESPEAK", "-k", "espeak", ESPEAK_TESTS, **env)


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
