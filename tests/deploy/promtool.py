"""promtool for the alert-rule tests: skipped on a laptop without it, a failure in CI or with
``TURBOTTS_REQUIRE_PROMTOOL=1`` (Debian/Ubuntu: ``apt-get install prometheus``)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.required_tools import REPO, is_required

ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = REPO / "deploy" / "prometheus" / "alerts_test.yml"
MISSING_PROMTOOL = "promtool is not on PATH (apt-get install prometheus)"


def promtool_or_skip() -> str:
    """The promtool executable, or skip the test; fails instead where promtool is required."""
    path = shutil.which("promtool")
    if path is None:
        if is_required("PROMTOOL"):
            reason = "required because CI or TURBOTTS_REQUIRE_PROMTOOL=1 is set"
            pytest.fail(f"{MISSING_PROMTOOL} ({reason})", pytrace=False)
        pytest.skip(MISSING_PROMTOOL)
    return path


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool_or_skip(), *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def _alert_test(alertname: str, series: dict[str, str], eval_time: str, num_firing: int) -> str:
    inputs = "".join(f"      - series: '{name}'\n        values: '{values}'\n" for name, values in series.items())
    return f"""rule_files: ['{ALERTS}']
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
{inputs}    promql_expr_test:
      - expr: count(ALERTS{{alertname="{alertname}", alertstate="firing"}}) or vector(0)
        eval_time: {eval_time}
        exp_samples:
          - labels: '{{}}'
            value: {num_firing}
"""


def alert_fires(alertname: str, series: dict[str, str], eval_time: str = "10m") -> bool:
    """Whether ``alertname`` (of alerts.yml) fires at ``eval_time`` on these series (promtool decides).

    Args:
        series: promtool input series, e.g. ``{'turbotts_quality_mcd_db{sentence="0"}': '46x20'}``
            (one sample a minute).

    Raises:
        AssertionError: promtool agrees with neither answer (a broken rule file, say).
    """
    outputs = []
    for num_firing in (1, 0):
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
            f.write(_alert_test(alertname, series, eval_time, num_firing))
            f.flush()
            done = promtool("test", "rules", f.name)
        if done.returncode == 0:
            return num_firing > 0
        outputs.append(done.stdout + done.stderr)
    raise AssertionError(f"promtool accepted neither answer for {alertname}:\n" + "\n".join(outputs))
