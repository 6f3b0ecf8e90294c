"""The suite's tiers and passes, the end-of-run banner, and the CPU kernels built once per run.

- Markers (registered in pyproject.toml) are put on tests at collection (``tests/markers.py``: by the
  fixtures and helpers a test uses, and by path). ``--quick`` (``scripts/test.sh --quick``) leaves the
  ``slow`` ones out: the browser, Ray, Python subprocesses and the kernel builds.
- ``--partition parallel|serial`` picks one of ``scripts/test.sh``'s two passes: the tests that may
  share the machine with pytest-xdist workers, or the ``serial`` ones (``tests/passes.py`` says why).
- The C++ extensions come from the install (``setup.py`` builds every variant) through the session
  fixtures ``int8_kernel`` (the variant this CPU runs), ``avx2_kernel``, ``sampler_kernel`` and
  ``read_probe``. Without AVX2 they skip; in CI they must be there, prebuilt.
- Every skip is counted by reason in the closing banner, and in CI only a few reasons may skip
  (``tests/skips.py``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.markers import mark
from tests.passes import count_outcomes, write_report
from tests.required_tools import is_ci, is_required
from tests.skips import SkipLedger
from turbotts.bench.read_probe import load_read_probe
from turbotts.cpu import variants
from turbotts.cpu.extensions import Loaded, import_prebuilt, load_kernels, load_sampler
from turbotts.cpu.info import cpu_info

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
#: 2 threads (CI's cores), shared out between xdist workers so that they do not oversubscribe the cores;
#: the Python subprocesses a worker starts (a server, the CLI) get its share too
THREADS = min(2, max(1, (os.cpu_count() or 2) // WORKERS))
torch.set_num_threads(THREADS)
if WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
#: read once and dropped, so that a pytest a test starts in a subprocess writes no pass report
PASS_REPORT = os.environ.pop("TURBOTTS_PASS_REPORT", None)

SKIPS = pytest.StashKey[SkipLedger]()
STARTED_S = pytest.StashKey[float]()
NUM_PARTITIONED = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("turbotts")
    group.addoption("--quick", action="store_true", help="leave out the slow tests (browser, Ray, subprocesses, "
                    "kernel builds): the inner loop, scripts/test.sh --quick")  # fmt: skip
    group.addoption("--partition", choices=("all", "parallel", "serial"), default="all",
                    help="run only the tests that may run in parallel, or only the serial ones")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SKIPS] = SkipLedger()
    config.pluginmanager.register(config.stash[SKIPS], "turbotts-skips")
    config.stash[STARTED_S] = time.monotonic()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    partition = config.getoption("--partition")
    selected, deselected, num_partitioned = [], [], 0
    for item in items:
        mark(item)
        is_serial = item.get_closest_marker("serial") is not None
        if partition != "all" and is_serial != (partition == "serial"):
            deselected.append(item)
            num_partitioned += 1
        elif config.getoption("--quick") and item.get_closest_marker("slow") is not None:
            deselected.append(item)
        else:
            selected.append(item)
    config.stash[NUM_PARTITIONED] = num_partitioned
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


def _loaded(load: Callable[[], Loaded]) -> ModuleType:
    """The extension ``load`` gives; where it is not there, a skip (a failure in CI, where it must be prebuilt)."""
    if "avx2" not in cpu_info().flags:
        reason = "the CPU kernels need AVX2, and this machine has none"
        if is_required("COMPILER"):
            pytest.fail(f"{reason} (required because CI or TURBOTTS_REQUIRE_COMPILER=1 is set)", pytrace=False)
        pytest.skip(reason)
    loaded = load()
    assert loaded.module is not None, f"no CPU kernels on an AVX2 machine: {loaded.why}"
    if is_required("COMPILER"):
        assert loaded.source == "prebuilt", f"CI installs every variant prebuilt, yet: {loaded.why}"
    return loaded.module


@pytest.fixture(scope="session")
def int8_kernel() -> ModuleType:
    """The CPU kernels this CPU runs: the best prebuilt variant (a run-time build where none is installed)."""
    return _loaded(load_kernels)


@pytest.fixture(scope="session")
def avx2_kernel() -> ModuleType:
    """The prebuilt AVX2 variant: what an AVX2-only machine runs (and any AVX2 CPU can)."""
    return _loaded(lambda: Loaded(import_prebuilt("kernels", variants.by_name("avx2")), "avx2", "prebuilt", ""))


@pytest.fixture(scope="session")
def sampler_kernel() -> ModuleType:
    """The compiled per-row sampler."""
    return _loaded(load_sampler)


@pytest.fixture(scope="session")
def read_probe() -> ModuleType:
    """The bench's read loop."""

    def loaded() -> Loaded:
        module = load_read_probe()
        is_prebuilt = module is not None and module.__name__ == "turbotts.bench._read_probe"
        return Loaded(module, "avx2", "prebuilt" if is_prebuilt else "jit", "the install has no prebuilt read probe")

    return _loaded(loaded)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In CI, a skip for a reason not on ``tests/skips.py``'s list fails the run; then this pass's report."""
    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: the controller sees every report and decides
        return
    if is_ci() and config.stash[SKIPS].not_allowed_in_ci and session.exitstatus in (0, 5):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if PASS_REPORT:
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        counts = count_outcomes(terminal.stats if terminal is not None else {})
        counts["deselected"] = max(0, counts["deselected"] - config.stash.get(NUM_PARTITIONED, 0))  # the other pass's
        duration_s = time.monotonic() - config.stash[STARTED_S]
        write_report(Path(PASS_REPORT), counts, duration_s)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Every skip, counted by reason: lost coverage is never silent (and in CI, only allowed reasons)."""
    terminalreporter.config.stash[SKIPS].write_banner(terminalreporter, is_ci=is_ci())
