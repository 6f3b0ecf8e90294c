"""The markers ``tests/conftest.py`` puts on tests: found from what a test uses, so no module has to remember them.

- ``kernels``: uses a fixture of the C++ CPU extensions (``int8_kernel``, ``avx2_kernel``, ``sampler_kernel``,
  ``read_probe``: prebuilt at install, so not slow);
- ``subprocess``: starts a Python subprocess: its code, a fixture's, or a ``tests`` helper's it calls
  names ``sys.executable`` (a ``turbotts`` command, a server process, a nested pytest);
- ``browser``: calls into ``tests/browser.py`` (Debian's Chromium), and so ``serial`` too;
- ``ray``: lives in ``tests/ray/``; ``serial`` too where it uses the cluster (``ray_url``): the tests of Ray's
  absence, its CLI's usage errors and its routing logic start no cluster and share the machine;
- ``slow``: a subprocess, the browser or Ray: the tests ``--quick`` leaves out;
- ``serial``: the browser, and :data:`MARKS_BY_PATH` (what no code shows: that a test measures the
  machine's pace, or loads all of it).
Why found, not written in each module: a test that starts using a subprocess or the browser leaves
the quick tier by itself, and one turned into an in-process call joins it.
"""

from __future__ import annotations

from types import CodeType
from typing import Any

import pytest

#: markers by where tests live (a path or a node id prefix), for what no code shows: what they measure
#: (throughput, capacity, stalls) or load the whole machine with (Ray), so must not share it with other
#: tests; a subprocess started out of sight; a test slow in itself
MARKS_BY_PATH: dict[str, tuple[str, ...]] = {
    "tests/ray/": ("ray",),
    # builds the container image (minutes of both cores) and runs it
    "tests/deploy/test_image.py": ("serial", "slow"),
    "tests/bench/test_loadtest_admission.py": ("serial",),
    "tests/bench/test_loadtest_underrun.py": ("serial",),
    # its live test compares a second listener's TTFA with a latency measured in the test: the machine's pace
    "tests/bench/test_loadtest_capacity.py": ("serial",),
    "tests/server/test_overload_http.py": ("serial",),
    # calibrates its chunk plan to the tiny model's pace on this machine, then streams on the wall clock
    "tests/engine/test_deadline_wall_clock.py": ("serial",),
    # its own process's RSS: in an xdist worker, what earlier tests left running there grew it by 250 MiB once
    "tests/model/test_kv_cache.py::test_a_cpu_cache_commits_memory_only_where_tokens_are_written": ("serial",),
    # writes and loads 1 GB of full-size random weights in the test (10-14 s): the full suite's, not the inner loop's
    "tests/test_cli.py::test_say_on_full_size_dummy_weights": ("slow",),
    # the command under test starts the Python subprocesses itself (``python -m turbotts.quality.probe``)
    "tests/quality/test_commands.py::test_quant_sweep_writes_reports": ("subprocess",),
}
KERNEL_FIXTURES = ("int8_kernel", "avx2_kernel", "sampler_kernel", "read_probe")
#: a running Ray cluster with two replicas: it loads the whole machine, so its tests run alone
RAY_CLUSTER_FIXTURES = ("ray_url",)
SLOW_MARKS = ("browser", "ray", "subprocess")
BROWSER_MODULE = "tests.browser"


def mark(item: pytest.Item) -> None:
    """Put the markers this test earns on it (and ``slow`` where any of :data:`SLOW_MARKS` is there)."""
    names = [name for prefix, marks in MARKS_BY_PATH.items() if item.nodeid.startswith(prefix) for name in marks]
    fixturenames = getattr(item, "fixturenames", ())
    if any(fixture in fixturenames for fixture in KERNEL_FIXTURES):
        names.append("kernels")
    if any(fixture in fixturenames for fixture in RAY_CLUSTER_FIXTURES):
        names.append("serial")
    uses = _Uses()
    for function in [getattr(item, "function", None), *_fixture_functions(item)]:
        uses.visit(function)
    if uses.has_executable:
        names.append("subprocess")
    if BROWSER_MODULE in uses.modules:
        names += ["browser", "serial"]  # Chromium's processes load the whole machine, and its playback keeps time
    for name in names:
        item.add_marker(name)
    if any(item.get_closest_marker(name) for name in SLOW_MARKS):
        item.add_marker("slow")


def _fixture_functions(item: pytest.Item) -> list[Any]:
    info = getattr(item, "_fixtureinfo", None)  # pytest's own record of the fixtures a test closes over
    if info is None:
        return []
    return [fixturedef.func for fixturedefs in info.name2fixturedefs.values() for fixturedef in fixturedefs]


class _Uses:
    """What a function reaches through the names in its code, following the ``tests`` package's functions."""

    def __init__(self) -> None:
        self.has_executable = False
        self.modules: set[str] = set()
        self._seen: set[CodeType] = set()

    def visit(self, function: Any) -> None:
        module = getattr(function, "__module__", None) or ""
        if not module.startswith("tests"):  # torch, pytest, turbotts itself: not what a test starts
            return
        function = getattr(function, "__wrapped__", function)  # a @contextmanager or functools.cache helper
        if isinstance(function, type):  # a helper class: its methods
            for member in vars(function).values():
                self.visit(getattr(member, "__func__", member))
            return
        code = getattr(function, "__code__", None)
        if code is None or code in self._seen:
            return
        self._seen.add(code)
        self.modules.add(module)
        names: set[str] = set()
        codes = [code]
        while codes:  # the function's own code and the code of the functions and lambdas inside it
            current = codes.pop()
            names.update(current.co_names)
            codes += [const for const in current.co_consts if isinstance(const, CodeType)]
        self.has_executable |= "executable" in names  # sys.executable
        for name in names:
            self.visit(function.__globals__.get(name))
