"""Real-time admission on this machine: the learned capacity, then loadtest at 1x, 2x, 4x it, admission on vs off.

Usage: ``python scripts/admission_figures.py OUT_DIR [--size full] [--quants none,int8]``

For each GPT precision: a ``turbotts serve`` with ``--admission realtime`` gets two short
calibration streams (one alone, then two together), and ``/readyz`` says the capacity it
learned and the step times it learned it from. Then ``turbotts loadtest`` runs closed-loop
at 1x, 2x and 4x ``max(capacity, 1)`` clients against that server, and again against a
fresh server with ``--admission off``. Everything goes to ``OUT_DIR/admission.json`` and a
PNG of continuity, goodput, TTFA and 503s against offered load.

Heavy on a CPU with full-size weights: run it under ``nice -n 10`` and keep it short.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx

from turbotts.bench.local_server import LocalServer, local_server

TEXTS = ["Hello there, how are you today?", "The weather is nice and warm.", "今天天气很好。", "This is a short test."]
FRAMES = 100  # code frames per stream (2.1 s of audio)
PREBUFFER_MS = 1000  # covers the chunk schedule (8, 24, 48, 96 frames); see tests/bench/test_loadtest_admission.py
SLO_TTFA_S = 3.0
MAX_QUEUE_WAIT_S = 10.0


def _serve(size: str, quant: str, admission: str, tmp: Path) -> AbstractContextManager[LocalServer]:
    log_path = tmp / f"serve-{admission}-{quant}.log"
    env = {"TURBOTTS_VOICES_DB": str(log_path.with_suffix(".sqlite3")), "TURBOTTS_RATE_LIMIT_RPS": "0",
           "TURBOTTS_MAX_BATCH_SIZE": "16", "TURBOTTS_CACHE_MAX_BYTES": "0"}  # fmt: skip
    flags = ["--load-format", "dummy", "--dummy-size", size, "--dtype", "fp32", "--quant", quant, "--vocoder-dtype",
             "fp32", "--admission", admission, "--max-queue-wait-s", str(MAX_QUEUE_WAIT_S), "--log-format", "text",
             "--no-watermark"]  # fmt: skip
    return local_server(flags, log_path, env=env, ready_timeout_s=600)


def _speak(url: str, text: str, response_format: str = "pcm") -> None:
    body = {"input": text, "response_format": response_format, "max_new_tokens": FRAMES // 2}
    httpx.post(f"{url}/v1/audio/speech", json=body, timeout=600).raise_for_status()


def _calibrate(url: str) -> dict[str, Any]:
    """One short stream alone, then two flac requests together (batch work: admitted past a capacity of 0
    or 1, so batch 2 gets timed too); the capacity the engine learned from their steps."""
    _speak(url, TEXTS[0])
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda t: _speak(url, t, "flac"), TEXTS[1:3]))
    details: dict[str, Any] = httpx.get(f"{url}/readyz", timeout=30).json()["details"]
    return details


def _loadtest(url: str, clients: int, tmp: Path, name: str) -> dict[str, Any]:
    texts = tmp / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    out = tmp / f"{name}.json"
    command = [sys.executable, "-m", "turbotts", "loadtest", url, "--concurrency", str(clients),
               "--num-requests", str(2 * clients), "--max-new-tokens", str(FRAMES), "--texts", str(texts),
               "--prebuffer-ms", str(PREBUFFER_MS), "--slo-ttfa-s", str(SLO_TTFA_S), "--timeout-s", "600",
               "--json", str(out)]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    report: dict[str, Any] = json.loads(out.read_text())
    keep = ("num_requests", "num_ok", "wall_s", "continuity_rate", "goodput_rps", "throughput_rps", "ttfa_s",
            "latency_s", "stall_s", "num_streams_with_stall_over_100ms", "status_counts", "error_counts")  # fmt: skip
    summary = {k: report[k] for k in keep}
    summary["num_503"] = report["status_counts"].get("503", 0)
    return summary


def run_precision(size: str, quant: str, tmp: Path) -> dict[str, Any]:
    with _serve(size, quant, "realtime", tmp) as server:
        url = server.url
        calibration = _calibrate(url)
        capacity = calibration["realtime_capacity_streams"]
        loads = [max(capacity, 1) * k for k in (1, 2, 4)]
        print(f"{quant}: capacity {capacity} streams, step ms {calibration['step_ms_by_batch']}", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {"realtime": [], "off": []}
        for clients in loads:
            runs["realtime"].append({"clients": clients, **_loadtest(url, clients, tmp, f"{quant}-on-{clients}")})
            print(f"  on  {clients}: {runs['realtime'][-1]['status_counts']}", flush=True)
        after = httpx.get(f"{url}/readyz", timeout=30).json()["details"]
    with _serve(size, quant, "off", tmp) as server:
        url = server.url
        _calibrate(url)  # the same warm-up
        for clients in loads:
            runs["off"].append({"clients": clients, **_loadtest(url, clients, tmp, f"{quant}-off-{clients}")})
            print(f"  off {clients}: {runs['off'][-1]['status_counts']}", flush=True)
    return {"quant": quant, "calibration": calibration, "after_load": after, "capacity_streams": capacity,
            "loads": loads, "runs": runs}  # fmt: skip


def plot(results: list[dict[str, Any]], path: Path, title: str) -> None:
    from turbotts.bench.figures import new_figure, save_figure

    fig, axes = new_figure(4, (16, 4.2))
    panels = (("continuity_rate", "continuity rate"), ("goodput_rps", "goodput (req/s)"),
              ("ttfa_p99", "TTFA p99 (s)"), ("num_503", "503 responses"))  # fmt: skip
    for ax, (key, label) in zip(axes, panels, strict=True):
        for result in results:
            for mode, style in (("realtime", "-"), ("off", "--")):
                runs = result["runs"][mode]
                xs = [r["clients"] for r in runs]
                ys = [r["ttfa_s"]["p99"] if key == "ttfa_p99" else r[key] for r in runs]
                name = f"{result['quant']} admission {mode} (capacity {result['capacity_streams']})"
                ax.plot(xs, [float("nan") if y is None else y for y in ys], marker="o", linestyle=style, label=name)
        ax.set(xlabel="concurrent streaming clients", ylabel=label, title=label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    save_figure(fig, path, title)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", default="full", choices=("tiny", "full"))
    parser.add_argument("--quants", default="none,int8")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        results = [run_precision(args.size, q, Path(tmp)) for q in args.quants.split(",")]
    from turbotts.cpu.info import cpu_info

    cpu = cpu_info()
    isa = sorted(f for f in cpu.flags if f.startswith(("avx512", "amx")) or f in ("avx2", "avx_vnni"))
    machine = {"cpu": cpu.model_name, "num_cpus": os.cpu_count(), "isa": isa}
    report = {"machine": machine, "size": args.size, "frames_per_stream": FRAMES, "prebuffer_ms": PREBUFFER_MS,
              "slo_ttfa_s": SLO_TTFA_S, "max_queue_wait_s": MAX_QUEUE_WAIT_S, "realtime_margin": 0.2,
              "results": results}  # fmt: skip
    (args.out / "admission.json").write_text(json.dumps(report, indent=2))
    plot(results, args.out / "admission.png", f"Real-time admission, {args.size}-size dummy weights, this CPU")


if __name__ == "__main__":
    main()
