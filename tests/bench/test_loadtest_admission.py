"""Real-time admission seen by ``turbotts loadtest``: a real server on loopback (tiny dummy model).

The same overload twice: 128 streaming clients at once against a server whose real-time
capacity is forced to one stream. With ``admission=realtime`` the extra streams wait in the
queue (one after the other) or get 503 (Retry-After, JSON body), and every admitted stream
plays without a stall; with ``admission=off`` all 128 start at once, the batch runs below real
time, and the listeners stall.

Why these numbers: the listener buffers 1 s before it starts, which covers the chunk schedule
(8 frames, then 24, 48, 96: the early chunks come faster than the batch runs), so what decides
a stall is the engine's pace over a 4.3 s stream. One stream of the tiny model runs several
times faster than real time even on a loaded 2-core machine; 128 at once run slower (rtf p50
1.7 on an idle AVX-512 box; 64 sat at 0.9-1.35 there, too close to real time to stall every
run). A warm-up request first keeps one-time costs (kernel creation) out of the run.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from tests.server.conftest import running_server
from tests.server.test_metrics_values import samples, value
from turbotts.cli import app

TEXTS = "Hello there, how are you today?\nThe weather is nice and warm.\n今天天气很好。\nThis is a test.\n"
FRAMES = 200  # code frames per stream: 4.3 s of audio
CLIENTS = 128
LOAD = ("--concurrency", str(CLIENTS), "--num-requests", str(CLIENTS), "--max-new-tokens", str(FRAMES),
        "--prebuffer-ms", "1000")  # fmt: skip
SERVER = {"max_new_tokens": FRAMES, "max_batch_size": CLIENTS, "kv_budget_bytes": 256 * 2**20}


def run_loadtest(tmp_path: Path, url: str, name: str) -> dict[str, Any]:
    warm_up = httpx.post(f"{url}/v1/audio/speech", json={"input": "Warm up.", "response_format": "pcm"}, timeout=120)
    assert warm_up.status_code == 200
    texts = tmp_path / "texts.txt"
    texts.write_text(TEXTS)
    out = tmp_path / f"{name}.json"
    result = CliRunner().invoke(app, ["loadtest", url, *LOAD, "--texts", str(texts), "--json", str(out)])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(out.read_text())
    print(f"\n{name}: rtf {report['rtf']}, statuses {report['status_counts']}, continuity {report['continuity_rate']}, "
          f"max stall {report['stall_s']['max']:.3f} s, TTFA p50 {report['ttfa_s']['p50']}")  # fmt: skip
    return report


def test_realtime_admission_refuses_or_queues_the_extra_streams_and_the_admitted_ones_never_stall(
    tmp_path: Path,
) -> None:
    overrides = {"admission": "realtime", "realtime_capacity_override": 1, "max_queue_wait_s": 8.0}
    with running_server(tmp_path, **SERVER, **overrides) as (url, _):
        ready = httpx.get(f"{url}/readyz").json()["details"]
        assert ready["admission"] == "realtime" and ready["realtime_capacity_streams"] == 1
        before = samples(url)
        report = run_loadtest(tmp_path, url, "admission_on")
        after = samples(url)
        statuses = report["status_counts"]
        assert set(statuses) <= {"200", "503"} and statuses.get("200", 0) >= 2 and statuses.get("503", 0) >= 1
        errors = dict(report["error_counts"])
        num_empty = errors.pop("no_audio", 0)  # random weights may draw EOS at once: a whole 200 of (next to) no audio
        assert errors == {"overloaded": statuses["503"]}
        assert statuses["200"] - num_empty >= 2
        refused = value(after, "turbotts_admission_rejections_total", reason="realtime") - value(
            before, "turbotts_admission_rejections_total", reason="realtime"
        )
        assert refused == statuses["503"]
        assert value(after, "turbotts_realtime_capacity_streams") == 1
        assert report["num_streams_with_stall_over_100ms"] == 0 and report["continuity_rate"] == 1.0
        # capacity 1: each admitted stream waited in the queue until the one before it had ended
        spoken = [r for r in report["runs"][0]["requests"] if r["status"] == 200 and r["ttfa_s"] is not None]
        admitted = sorted(spoken, key=lambda r: r["ttfa_s"])
        for before_it, after_it in itertools.pairwise(admitted):
            assert after_it["sent_s"] + after_it["ttfa_s"] >= before_it["sent_s"] + before_it["latency_s"] - 0.05


def test_the_same_load_with_admission_off_stalls(tmp_path: Path) -> None:
    with running_server(tmp_path, **SERVER, admission="off", realtime_capacity_override=1) as (url, _):
        assert httpx.get(f"{url}/readyz").json()["details"]["admission"] == "off"
        report = run_loadtest(tmp_path, url, "admission_off")
        assert report["status_counts"] == {"200": CLIENTS}  # nobody is refused ...
        assert report["num_streams_with_stall_over_100ms"] > 0  # ... and listeners wait for audio mid-stream
        assert report["continuity_rate"] < 1.0
