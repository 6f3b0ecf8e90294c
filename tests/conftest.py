from __future__ import annotations

import pytest
import torch

from tests.conftest_redis import MISSING_REDIS
from tests.deploy.promtool import MISSING_PROMTOOL

torch.set_num_threads(2)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """A banner when Redis, espeak-ng or promtool tests were skipped: lost coverage is never silent."""
    skipped = terminalreporter.stats.get("skipped", [])
    num_redis = sum(1 for report in skipped if "redis-server" in str(report.longrepr))
    if num_redis:
        terminalreporter.write_sep("!", f"{num_redis} Redis tests SKIPPED: {MISSING_REDIS}", red=True, bold=True)
    num_espeak = sum(1 for report in skipped if "espeak-ng is not on PATH" in str(report.longrepr))
    if num_espeak:
        message = f"{num_espeak} real-speech watermark tests SKIPPED: espeak-ng is not on PATH (apt-get install it)"
        terminalreporter.write_sep("!", message, red=True, bold=True)
    num_promtool = sum(1 for report in skipped if MISSING_PROMTOOL in str(report.longrepr))
    if num_promtool:
        message = f"{num_promtool} alert-rule tests SKIPPED: {MISSING_PROMTOOL}"
        terminalreporter.write_sep("!", message, red=True, bold=True)
