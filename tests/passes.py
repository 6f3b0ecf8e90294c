"""One closing line and one exit code for ``scripts/test.sh``'s two pytest passes.

Why two passes: most tests run in parallel (pytest-xdist, ``--partition parallel``), and the
``serial`` ones (throughput, capacity and stall measurements, the browser, Ray) run after them,
alone on the machine (``--partition serial``). Each pass writes a report here
(``TURBOTTS_PASS_REPORT``, from ``tests/conftest.py``); ``python -m tests.passes DIR NAME:RC ...``
prints each pass's counts and then their sum as pytest's own closing line, so the run ends on
a true summary of every test, and exits non-zero if either pass failed. A pass that selected
no test (pytest's exit code 5) is no failure while another pass ran tests.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

#: pytest's order of outcomes in its closing line
OUTCOMES = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "warnings", "error")
NO_TESTS_COLLECTED = 5


def count_outcomes(stats: dict[str, list[Any]]) -> dict[str, int]:
    """A terminal reporter's ``stats`` counted as its closing line counts them."""
    return {key: sum(1 for report in stats.get(key, []) if getattr(report, "count_towards_summary", True))
            for key in OUTCOMES}  # fmt: skip


def write_report(path: Path, counts: dict[str, int], duration_s: float) -> None:
    """A pass's outcome counts (pytest's keys) and duration, as JSON at ``path`` (its exit code comes from
    the shell: pytest may still change it after the session's end)."""
    path.write_text(json.dumps({"counts": counts, "duration_s": duration_s}))


def summary_line(counts: dict[str, int], duration_s: float) -> str:
    """``1 failed, 820 passed, 5 skipped in 360.12s (0:06:00)``, as pytest writes it."""
    parts = [f"{counts[outcome]} {_noun(outcome, counts[outcome])}" for outcome in OUTCOMES if counts.get(outcome)]
    seconds = f"{duration_s:.2f}s"
    if duration_s >= 60:
        whole = int(duration_s)
        seconds += f" ({whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d})"
    return f"{', '.join(parts) or 'no tests ran'} in {seconds}"


def _noun(outcome: str, count: int) -> str:
    if outcome not in ("error", "warnings"):
        return outcome
    noun = outcome.replace("warnings", "warning")
    return noun if count == 1 else f"{noun}s"


def exit_code(codes: list[int]) -> int:
    """The first failing pass's code; 5 only when no pass selected a test; else 0."""
    failing = [code for code in codes if code not in (0, NO_TESTS_COLLECTED)]
    if failing:
        return failing[0]
    return NO_TESTS_COLLECTED if codes and all(code == NO_TESTS_COLLECTED for code in codes) else 0


def main(argv: list[str]) -> int:
    """``DIR NAME:RC ...``: each pass's report ``DIR/NAME.json`` and its exit code from the shell."""
    folder, passes = Path(argv[0]), [arg.rsplit(":", 1) for arg in argv[1:]]
    total: dict[str, int] = {}
    total_s = 0.0
    codes = []
    for name, rc in passes:
        codes.append(int(rc))
        path = folder / f"{name}.json"
        if not path.is_file():  # pytest did not get as far as its session's end
            print(f"{name} pass: exit {rc}, no report")
            continue
        report = json.loads(path.read_text())
        for outcome, count in report["counts"].items():
            total[outcome] = total.get(outcome, 0) + count
        total_s += report["duration_s"]
        print(f"{name} pass: exit {rc}, {summary_line(report['counts'], report['duration_s'])}")
    code = exit_code(codes)
    line = f" {summary_line(total, total_s)} "
    width = shutil.get_terminal_size().columns
    color = ("\x1b[32m" if code == 0 else "\x1b[31m") if sys.stdout.isatty() else ""
    print(f"{color}{line.center(max(width, len(line) + 2), '=')}{chr(27) + '[0m' if color else ''}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
