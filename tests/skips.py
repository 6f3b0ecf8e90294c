"""Every skipped test, counted by reason at the end of a run; in CI only a short list of reasons may skip.

Why: a skip is coverage lost, and a reason printed once in a long run is easy to miss. The banner
(``tests/conftest.py``'s ``pytest_terminal_summary``) groups all skips by reason. In CI (``CI=true``,
set by ``.ci/run``) a skip whose reason matches none of :data:`ALLOWED_IN_CI` fails the run: a tool
CI should have installed, or a test that stopped running, shows up as a failure, not as one more
``s``. What may skip in CI is what no install step can change: the machine's hardware and its
host kernel's settings. Tests that need a tool fail by themselves in CI (``tests/required_tools.py``);
this is the net under them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

#: reasons CI may skip for (a substring of the skip reason), each with why no install step helps
ALLOWED_IN_CI = {
    "GPU": "CI machines have no GPU: the gpu tests run where the device tool lends one",
    "transparent huge pages off": "a setting of the host's kernel, not of the machine CI installs",
    "(no VNNI)": "a CPU feature: fbgemm's int8 path differs by CPU",
    "has no decoder for": "a reader and format pair the test matrix leaves out by design",
}

#: what a reason's skips lose, named in the banner (a substring of the reason: the name)
WHAT_IS_LOST = {
    "redis-server": "Redis tests",
    "espeak-ng": "real-speech watermark tests",
    "promtool": "alert-rule tests",
    "CPU kernels": "CPU kernel tests",
    "GPU": "GPU tests",
}


def skip_reason(report: pytest.TestReport) -> str:
    """The reason a skipped report gives, without pytest's ``Skipped: `` prefix."""
    longrepr = report.longrepr
    message = str(longrepr[2]) if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3 else str(longrepr)
    return message.removeprefix("Skipped: ")


def is_allowed_in_ci(reason: str, report: pytest.TestReport) -> bool:
    """Whether CI may skip this test: a ``gpu``-marked test, or a reason on :data:`ALLOWED_IN_CI`."""
    return "gpu" in report.keywords or any(allowed in reason for allowed in ALLOWED_IN_CI)


@dataclass(eq=False)  # a pytest plugin: hashed by identity
class SkipLedger:
    """The run's skips, by reason (fed with every report, on the xdist controller too)."""

    reasons: Counter[str] = field(default_factory=Counter)
    not_allowed_in_ci: Counter[str] = field(default_factory=Counter)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Count a skip (a pytest hook: registered as a plugin in ``tests/conftest.py``)."""
        if not report.skipped or hasattr(report, "wasxfail"):  # an xfail is reported as a skip
            return
        reason = skip_reason(report)
        self.reasons[reason] += 1
        if not is_allowed_in_ci(reason, report):
            self.not_allowed_in_ci[reason] += 1

    def write_banner(self, terminalreporter: pytest.TerminalReporter, *, is_ci: bool) -> None:
        """One line per reason, most frequent first, naming what is lost; those CI does not allow in red."""
        for reason, count in self.reasons.most_common():
            what = next((noun for key, noun in WHAT_IS_LOST.items() if key in reason), "tests")
            is_allowed = reason not in self.not_allowed_in_ci
            note = "allowed in CI" if is_allowed else ("FAILS the run in CI" if is_ci else "fails in CI")
            message = f"{count} {what} SKIPPED: {reason} [{note}]"
            terminalreporter.write_sep("!", message, red=not is_allowed, yellow=is_allowed, bold=True)
        if is_ci and self.not_allowed_in_ci:
            allowed = "; ".join(ALLOWED_IN_CI)
            message = f"CI may skip only for a GPU or these reasons ({allowed}): the run FAILS"
            terminalreporter.write_sep("!", message, red=True, bold=True)
