"""benchmarks/locustfile.py against a real tiny-model server, headless for a few seconds (needs locust:
an optional tool, not a TurboTTS dependency, that scripts/setup.sh installs; skipped without it on a
laptop, a failure in CI or with ``TURBOTTS_REQUIRE_LOCUST=1``)."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.required_tools import REPO, is_required
from tests.server.conftest import running_server

LOCUSTFILE = REPO / "benchmarks" / "locustfile.py"


def test_locust_reports_ttfa_and_streams_without_failures(tmp_path: Path) -> None:
    if importlib.util.find_spec("locust") is None:  # not imported here: locust monkey-patches ssl and sockets
        reason = "locust is not installed (pip install -e '.[locust]', as scripts/setup.sh does)"
        if is_required("LOCUST"):
            pytest.fail(f"{reason}: required because CI or TURBOTTS_REQUIRE_LOCUST=1 is set", pytrace=False)
        pytest.skip(reason)
    with running_server(tmp_path) as (url, _):
        done = subprocess.run(
            [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--host", url, "--headless", "-u", "2", "-r", "2",
             "-t", "5s", "--csv", str(tmp_path / "run"), "--only-summary", "--tts-format", "wav",
             "--tts-max-new-tokens", "8"],
            capture_output=True, text=True, timeout=180, cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with (tmp_path / "run_stats.csv").open() as f:
        rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(f)}
    for key in (("POST", "speech"), ("TTFA", "ttfa"), ("STREAM", "stream")):
        assert int(rows[key]["Request Count"]) >= 1, key
        assert int(rows[key]["Failure Count"]) == 0, key
    assert rows[("TTFA", "ttfa")]["Request Count"] == rows[("STREAM", "stream")]["Request Count"]  # one each per stream
    assert float(rows[("STREAM", "stream")]["Average Content Size"]) > 44  # more than a WAV header
