"""A missing Ray skips the Ray tests on a laptop but fails the run in CI (issue 31: coverage vanished silently)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.required_tools import REPO, run_pytest_without_tools

A_RAY_TEST = "tests/ray/test_routing.py"


def _run_without_ray(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest where ``import ray`` fails as it does when the package is absent (a package that raises shadows it)."""
    shadow = tmp_path / "ray"
    shadow.mkdir(exist_ok=True)
    (shadow / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'ray\'", name="ray")\n')
    return run_pytest_without_tools("RAY", "-rs", A_RAY_TEST, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}", **env)


def test_missing_ray_skips_with_a_reason_outside_ci(tmp_path: Path) -> None:
    result = _run_without_ray(tmp_path)
    assert result.returncode == 0, result.stdout[-2000:]
    assert "passed" not in result.stdout and "skipped" in result.stdout, result.stdout[-2000:]
    assert "ray is not installed" in result.stdout


def test_missing_ray_fails_when_required(tmp_path: Path) -> None:
    for env in ({"TURBOTTS_REQUIRE_RAY": "1"}, {"CI": "true"}):
        result = _run_without_ray(tmp_path, **env)
        assert result.returncode == 1, result.stdout[-2000:]
        assert "ray is not installed" in result.stdout
        assert "required because CI or TURBOTTS_REQUIRE_RAY=1 is set" in result.stdout, result.stdout[-3000:]
