"""Turn run results into the JSON people compare and a PNG they look at."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turbotts.bench.figures import new_figure, save_figure

if TYPE_CHECKING:  # the engine (and torch) is not needed to summarize: `turbotts loadtest` shares these helpers
    from turbotts.bench.runner import RunResult


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    ordered = sorted(values)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {"p50": pick(0.50), "p90": pick(0.90), "p99": pick(0.99), "mean": statistics.fmean(ordered)}


def summarize(result: RunResult) -> dict[str, Any]:
    ttfa = [t.first_audio_s - t.arrival_s for t in result.timings if t.first_audio_s is not None]
    latency = [t.finish_s - t.arrival_s for t in result.timings if t.finish_s is not None]
    throughput = result.audio_s / result.wall_s if result.wall_s > 0 else 0.0
    return {
        "mode": result.mode,
        "concurrency": result.concurrency,
        "num_requests": len(result.timings),
        "wall_s": result.wall_s,
        "audio_s": result.audio_s,
        "throughput_audio_s_per_s": throughput,
        "rtf": result.wall_s / result.audio_s if result.audio_s else None,
        "ttfa_s": percentiles(ttfa),
        "latency_s": percentiles(latency),
        "step_ms_by_batch": {str(b): 1000 * statistics.median(v) for b, v in sorted(result.step_s_by_batch.items())},
    }


def write_json(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))


def write_plot(runs: list[dict[str, Any]], path: Path, title: str) -> None:
    """Throughput and TTFA p50 against concurrency, one line per mode (and precision, when several were run)."""
    fig, (ax_tp, ax_ttfa) = new_figure(2, (11, 4.2))
    has_several = len({r.get("precision", r.get("quant")) for r in runs}) > 1
    for key in dict.fromkeys((r["mode"], r.get("precision", r.get("quant"))) for r in runs):
        mode = f"{key[0]} ({key[1]})" if has_several else key[0]
        points = sorted(((r["concurrency"], r) for r in runs if (r["mode"], r.get("precision", r.get("quant"))) == key),
                        key=lambda point: point[0])  # fmt: skip
        xs = [c for c, _ in points]
        (line,) = ax_tp.plot(xs, [r["throughput_audio_s_per_s"] for _, r in points], marker="o", label=mode)
        color = line.get_color()
        ax_ttfa.plot(xs, [r["ttfa_s"]["p50"] or 0.0 for _, r in points], marker="o", color=color, label=f"{mode} p50")
        ax_ttfa.plot(
            xs,
            [r["ttfa_s"]["p99"] or 0.0 for _, r in points],
            marker="x",
            linestyle="--",
            color=color,
            label=f"{mode} p99",
        )
    ax_tp.set(xlabel="concurrency", ylabel="audio seconds per wall second", title="Throughput")
    ax_ttfa.set(xlabel="concurrency", ylabel="seconds", title="Time to first audio")
    for ax in (ax_tp, ax_ttfa):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(fig, path, title)
