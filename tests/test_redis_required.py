"""A missing redis-server skips the Redis tests on a laptop but fails the run in CI (issue: coverage vanished)."""

from __future__ import annotations

import subprocess

from tests.required_tools import run_pytest_without_tools

A_REDIS_TEST = "tests/cache/test_redis_cache.py"


def _run_without_redis(**env: str) -> subprocess.CompletedProcess[str]:
    return run_pytest_without_tools("REDIS", "-x", A_REDIS_TEST, **env)


def test_missing_redis_skips_with_a_banner_outside_ci() -> None:
    result = _run_without_redis()
    assert result.returncode == 0, result.stdout[-2000:]
    assert "skipped" in result.stdout
    assert "Redis tests SKIPPED" in result.stdout


def test_missing_redis_fails_when_required() -> None:
    for env in ({"TURBOTTS_REQUIRE_REDIS": "1"}, {"CI": "true"}):
        result = _run_without_redis(**env)
        assert result.returncode == 1, result.stdout[-2000:]
        assert "redis-server is not on PATH" in result.stdout
        assert "required because CI or TURBOTTS_REQUIRE_REDIS=1 is set" in result.stdout
