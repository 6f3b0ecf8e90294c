"""A missing promtool skips the alert-rule tests on a laptop but fails them in CI."""

from __future__ import annotations

import subprocess

from tests.required_tools import run_pytest_without_tools

PROMTOOL_TESTS = ("tests/deploy/test_alerts.py", "-k", "rules_are_valid or unit_tests_pass")


def _run_without_promtool(**env: str) -> subprocess.CompletedProcess[str]:
    return run_pytest_without_tools("PROMTOOL", *PROMTOOL_TESTS, **env)


def test_missing_promtool_skips_with_a_reason_and_a_banner_outside_ci() -> None:
    result = _run_without_promtool()
    assert result.returncode == 0, result.stdout[-2000:]
    assert "2 skipped" in result.stdout and "passed" not in result.stdout
    assert "alert-rule tests SKIPPED: promtool is not on PATH" in result.stdout


def test_missing_promtool_fails_when_required() -> None:
    for env in ({"TURBOTTS_REQUIRE_PROMTOOL": "1"}, {"CI": "true"}):
        result = _run_without_promtool(**env)
        assert result.returncode == 1, result.stdout[-2000:]
        assert "skipped" not in result.stdout
        assert "required because CI or TURBOTTS_REQUIRE_PROMTOOL=1 is set" in result.stdout
