"""``turbotts serve --backend ray``: bad scale-out flags are a message and exit code 2, before Ray starts."""

from __future__ import annotations

import subprocess
import sys


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "turbotts", "serve", "--backend", "ray", "--load-format", "dummy", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_min_replicas_above_max_is_a_usage_error() -> None:
    result = _serve("--min-replicas", "3", "--max-replicas", "2")
    assert result.returncode == 2
    assert "min_replicas must not exceed max_replicas" in result.stderr


def test_an_unknown_backend_is_a_usage_error() -> None:
    result = _serve("--backend", "kubernetes")
    assert result.returncode == 2 and "backend" in result.stderr
