from __future__ import annotations

import pytest
import torch

from tests.conftest_redis import MISSING_REDIS

torch.set_num_threads(2)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """A banner when Redis or espeak-ng tests were skipped: lost coverage is never silent (scripts/test.sh)."""
    skipped = terminalreporter.stats.get("skipped", [])
    num_redis = sum(1 for report in skipped if "redis-server" in str(report.longrepr))
    if num_redis:
        terminalreporter.write_sep("!", f"{num_redis} Redis tests SKIPPED: {MISSING_REDIS}", red=True, bold=True)
    num_espeak = sum(1 for report in skipped if "espeak-ng is not on PATH" in str(report.longrepr))
    if num_espeak:
        message = f"{num_espeak} real-speech watermark tests SKIPPED: espeak-ng is not on PATH (apt-get install it)"
        terminalreporter.write_sep("!", message, red=True, bold=True)
