"""System tools some tests need (redis-server, espeak-ng, Chromium, a C++ compiler, ...): skipped on a
laptop without them, a failure in CI (``CI=true``, set by ``.ci/run``) or when ``TURBOTTS_REQUIRE_<TOOL>=1``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UNUSED_PLUGINS = ("-p", "no:cacheprovider", "-p", "no:schemathesis", "-p", "no:hypothesispytest", "-p", "no:locust")


def is_ci() -> bool:
    """Whether this is a CI run (``CI=true``, as ``.ci/run`` sets it)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def is_required(tool: str) -> bool:
    """Whether a missing ``tool`` (``REDIS``, ``ESPEAK``, ``COMPILER``, ...) must fail the run, not skip."""
    return is_ci() or os.environ.get(f"TURBOTTS_REQUIRE_{tool}") == "1"


def run_pytest_without_tools(tool: str, *pytest_args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest in a subprocess whose PATH holds only this Python (so no system tool), with ``env`` set.

    Without the plugins no such run needs (schemathesis and hypothesis: 1.5 s of start-up each time).
    """
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", f"TURBOTTS_REQUIRE_{tool}")}
    clean["PATH"] = str(Path(sys.executable).parent)
    clean["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *UNUSED_PLUGINS, *pytest_args],
        cwd=REPO, env={**clean, **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
