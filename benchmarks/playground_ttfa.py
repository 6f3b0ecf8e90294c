"""Time to first audio in the browser: playground click to the first sample played.

Starts ``turbotts serve`` on dummy weights (tiny, then full), opens the playground in Debian's
Chromium, and presses play ``--trials`` times per format without a seed (never cached). The page
reports, per run, the click to the first SSE audio chunk (``first_chunk_ms``: network + synthesis)
and the click to the first sample played (``ttfa_ms``: plus decoding and scheduling); then the
run is stopped, which aborts the request on the server.

    nice -n 10 .venv/bin/python benchmarks/playground_ttfa.py --sizes tiny full --trials 10 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.browser import chromium_browser  # noqa: E402
from tests.serve_process import serving  # noqa: E402
from turbotts.cpu.info import cpu_info  # noqa: E402

TEXT = "Hello! This is TurboTTS, streaming speech straight into the browser."
FORMATS = ("pcm", "mp3")
WAIT_MS = 600_000
_PLAYED_OR_ENDED = (
    "(() => { const l = window.turbottsPlayground.last;"
    " return l && (l.ttfaMs !== null || l.error || l.isFinished); })()"
)


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))],
        "mean": statistics.fmean(ordered),
        "min": ordered[0],
        "max": ordered[-1],
    }


def _one_run(page: Any, fmt: str) -> dict[str, Any]:
    """Press play, wait for the first sample to play, then press stop (the server aborts the rest).

    Random weights may end a request before any audio (an end token drawn first): such a run
    finishes with ``ttfaMs`` null and is counted, not timed.
    """
    page.select_option("#format", fmt)
    page.click("#play")
    page.wait_for_function(_PLAYED_OR_ENDED, timeout=WAIT_MS)
    last: dict[str, Any] = page.evaluate("window.turbottsPlayground.last")
    page.evaluate("document.getElementById('stop').click()")  # a no-op once playback ended
    if last["error"]:
        raise RuntimeError(f"the playground showed an error: {last['error']}")
    return last


def measure(size: str, num_trials: int) -> dict[str, Any]:
    args = ("--load-format", "dummy", "--dummy-size", size)
    env = {"TURBOTTS_DTYPE": "auto", "TURBOTTS_VOCODER_DTYPE": "auto", "TURBOTTS_RATE_LIMIT_RPS": "0"}
    with (
        tempfile.TemporaryDirectory() as tmp,
        serving(Path(tmp), *args, env=env) as (url, _),
        chromium_browser() as browser,
    ):
        page = browser.new_page()
        page.goto(f"{url}/")
        page.wait_for_function("window.turbottsPlayground.voicesLoaded")
        page.fill("#text", TEXT)
        page.fill("#seed", "")
        _one_run(page, "pcm")  # warm-up: first-request costs are not the steady figure
        result: dict[str, Any] = {}
        for fmt in FORMATS:
            runs, num_silent = [], 0
            while len(runs) < num_trials:
                run = _one_run(page, fmt)
                if run["ttfaMs"] is None:
                    num_silent += 1
                else:
                    runs.append(run)
            result[fmt] = {
                "num_trials": num_trials,
                "num_without_audio": num_silent,
                "ttfa_ms": _summary([r["ttfaMs"] for r in runs]),
                "first_chunk_ms": _summary([r["firstChunkMs"] for r in runs]),
            }
            print(size, fmt, json.dumps(result[fmt]["ttfa_ms"]), flush=True)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "full"], choices=["tiny", "full"])
    parser.add_argument("--trials", nargs="+", type=int, default=[10, 3], help="per size, in order")
    parser.add_argument("--out", type=Path, default=REPO / "docs/benchmarks/playground_ttfa.json")
    options = parser.parse_args()
    report: dict[str, Any] = {
        "what": "playground click to the first sample played (ttfa_ms) and to the first SSE audio chunk "
        "(first_chunk_ms), headless Debian Chromium on the same machine as the server, loopback",
        "text": TEXT,
        "cpu": cpu_info().report(),
        "server": "turbotts serve --load-format dummy (watermark on), dtype auto, one client",
        "sizes": {},
        "load_average_1m": {},  # per size: before and after its runs
    }
    for size, num_trials in zip(options.sizes, options.trials, strict=False):
        load_before = os.getloadavg()[0]
        report["sizes"][size] = measure(size, num_trials)
        # a shared machine: the 1-minute load average says how much else was running
        report["load_average_1m"][size] = [load_before, os.getloadavg()[0]]
    options.out.write_text(json.dumps(report, indent=2) + "\n")
    plot(report, options.out.with_suffix(".png"))
    print(f"wrote {options.out} and its .png")


def plot(report: dict[str, Any], path: Path) -> None:
    """Bars: p50 of the first chunk and of the first sample played, per model size and format (p90 whiskers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, chunk, played, played_p90 = [], [], [], []
    for size, by_format in report["sizes"].items():
        for fmt, figures in by_format.items():
            labels.append(f"{size}\n{fmt}")
            chunk.append(figures["first_chunk_ms"]["p50"])
            played.append(figures["ttfa_ms"]["p50"])
            played_p90.append(figures["ttfa_ms"]["p90"] - figures["ttfa_ms"]["p50"])
    x = range(len(labels))
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.bar([i - 0.2 for i in x], chunk, 0.4, label="first SSE audio chunk (p50)")
    axes.bar([i + 0.2 for i in x], played, 0.4, yerr=[[0] * len(x), played_p90], label="first sample played (p50, p90)")
    axes.set_xticks(list(x), labels)
    axes.set_ylabel("ms after the click")
    axes.set_title(f"Playground time to first audio ({report['cpu']['isa']}, headless Chromium)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
