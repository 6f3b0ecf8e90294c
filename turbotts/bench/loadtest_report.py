"""Summaries of a load test run (the JSON keys people compare) and its PNG.

Definitions, so that two reports mean the same thing:

- ``ttfa_s``: request sent to the first *playable* audio (decoded), successful requests only;
- ``latency_s``: request sent to the last byte; ``rtf``: latency over the decoded audio duration;
- ``throughput_audio_s_per_s``: decoded audio seconds of successful requests per wall second;
  ``throughput_rps``: successful requests per wall second;
- ``continuity_rate``: share of successful streams whose longest stall was at most 100 ms;
- ``goodput_rps``: successful requests per wall second that met the TTFA SLO *and* were continuous;
- ``stall_s``: ``total`` is the sum of every stall of every stream, ``max`` the longest single stall;
- ``status_counts``: HTTP status of every request (``"none"`` when no status came back);
  ``error_counts``: why a request failed (the error body's ``code``, or the client exception's name).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from turbotts.bench.figures import new_figure, save_figure
from turbotts.bench.loadtest_client import RequestRecord, RunResult
from turbotts.bench.loadtest_player import CONTINUITY_STALL_S
from turbotts.bench.report import percentiles


def summarize_run(result: RunResult, offered_load: dict[str, float], slo_ttfa_s: float) -> dict[str, Any]:
    """The report of one run at one offered load (``{"concurrency": 4}`` or ``{"request_rate": 2.0}``)."""
    records = result.records
    ok = [r for r in records if r.is_ok]
    playbacks = [r.playback for r in ok if r.playback is not None]
    continuous = [r for r in ok if r.playback is not None and r.playback.is_continuous]
    good = [r for r in continuous if r.ttfa_s is not None and r.ttfa_s <= slo_ttfa_s]
    audio_s = sum(r.audio_s for r in ok)
    wall_s = result.wall_s

    def per_s(value: float) -> float:
        return value / wall_s if wall_s > 0 else 0.0

    return {
        "offered_load": offered_load,
        "num_requests": len(records),
        "num_ok": len(ok),
        "wall_s": wall_s,
        "audio_s": audio_s,
        "throughput_audio_s_per_s": per_s(audio_s),
        "throughput_rps": per_s(len(ok)),
        "goodput_rps": per_s(len(good)),
        "continuity_rate": len(continuous) / len(ok) if ok else None,
        "slo_ttfa_s": slo_ttfa_s,
        "slo_ttfa_met_rate": sum(r.ttfa_s is not None and r.ttfa_s <= slo_ttfa_s for r in ok) / len(ok) if ok else None,
        "ttfa_s": percentiles([r.ttfa_s for r in ok if r.ttfa_s is not None]),
        "first_byte_s": percentiles([r.first_byte_s for r in ok if r.first_byte_s is not None]),
        "latency_s": percentiles([r.latency_s for r in ok if r.latency_s is not None]),
        "rtf": percentiles([r.latency_s / r.audio_s for r in ok if r.latency_s is not None and r.audio_s > 0]),
        "stall_s": {
            "total": sum((p.total_stall_s for p in playbacks), 0.0),
            "max": max((p.max_stall_s for p in playbacks), default=0.0),
            "per_stream": percentiles([p.total_stall_s for p in playbacks]),
        },
        "num_stalls": sum(p.num_stalls for p in playbacks),
        "num_streams_with_stall_over_100ms": sum(p.max_stall_s > CONTINUITY_STALL_S for p in playbacks),
        "status_counts": dict(sorted(Counter(_status(r) for r in records).items())),
        "error_counts": dict(sorted(Counter(r.error_type for r in records if r.error_type is not None).items())),
        "cache_counts": dict(sorted(Counter(r.cache for r in ok if r.cache is not None).items())),
    }


def _status(record: RequestRecord) -> str:
    return "none" if record.status is None else str(record.status)


def request_rows(result: RunResult) -> list[dict[str, Any]]:
    """Per-request records for the JSON (times in seconds), so a report can be re-analysed later."""
    rows = []
    for r in result.records:
        rows.append(
            {
                "index": r.index,
                "format": r.response_format,
                "sent_s": r.sent_s,
                "status": r.status,
                "error_type": r.error_type,
                "ttfa_s": r.ttfa_s,
                "latency_s": r.latency_s,
                "audio_s": r.audio_s,
                "cache": r.cache,
                "total_stall_s": r.playback.total_stall_s if r.playback else None,
                "max_stall_s": r.playback.max_stall_s if r.playback else None,
            }
        )
    return rows


def offered_label(offered_load: dict[str, float]) -> tuple[str, float]:
    """The x axis of a sweep: ("request rate (req/s)", 2.0) or ("concurrency", 4)."""
    if "request_rate" in offered_load:
        return "offered load (requests/s)", offered_load["request_rate"]
    return "offered load (concurrent clients)", offered_load["concurrency"]


def write_plot(runs: list[dict[str, Any]], rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Several runs: latency and continuity against offered load. One run: each request over the run."""
    if len(runs) > 1:
        _sweep_plot(runs, path, title)
    else:
        _timeline_plot(rows, path, title)


def _sweep_plot(runs: list[dict[str, Any]], path: Path, title: str) -> None:
    fig, (ax_latency, ax_quality) = new_figure(2, (11, 4.2))
    xlabel = offered_label(runs[0]["offered_load"])[0]
    points = sorted(runs, key=lambda r: offered_label(r["offered_load"])[1])
    xs = [offered_label(r["offered_load"])[1] for r in points]
    for key, name, color in (("ttfa_s", "TTFA", "tab:blue"), ("latency_s", "latency", "tab:orange")):
        for quantile, style in (("p50", "-"), ("p99", "--")):
            values = [r[key][quantile] if r[key][quantile] is not None else float("nan") for r in points]
            ax_latency.plot(xs, values, marker="o", linestyle=style, color=color, label=f"{name} {quantile}")
    slo = runs[0]["slo_ttfa_s"]
    ax_latency.axhline(slo, color="gray", linestyle=":", label=f"TTFA SLO {slo:g} s")
    ax_latency.set(xlabel=xlabel, ylabel="seconds", title="Latency")
    continuity = [r["continuity_rate"] if r["continuity_rate"] is not None else float("nan") for r in points]
    ax_quality.plot(xs, continuity, marker="o", color="tab:green", label="continuity rate")
    ax_quality.set(xlabel=xlabel, ylabel="share of streams", ylim=(-0.05, 1.05), title="Continuity and goodput")
    ax_goodput = ax_quality.twinx()
    ax_goodput.plot(xs, [r["goodput_rps"] for r in points], marker="s", color="tab:red", label="goodput")
    ax_goodput.plot(xs, [r["throughput_rps"] for r in points], marker="x", linestyle="--", color="tab:gray",
                    label="throughput")  # fmt: skip
    ax_goodput.set_ylabel("requests/s")
    for ax in (ax_latency, ax_quality, ax_goodput):
        ax.legend(fontsize=8, loc="upper left" if ax is not ax_goodput else "upper right")
    ax_latency.grid(alpha=0.3)
    ax_quality.grid(alpha=0.3)
    save_figure(fig, path, title)


def _timeline_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    fig, (ax_latency, ax_stall) = new_figure(2, (11, 4.2))
    ok = [r for r in rows if r["error_type"] is None]
    failed = [r for r in rows if r["error_type"] is not None]
    ax_latency.scatter([r["sent_s"] for r in ok], [r["ttfa_s"] for r in ok], s=12, label="TTFA")
    ax_latency.scatter([r["sent_s"] for r in ok], [r["latency_s"] for r in ok], s=12, marker="x", label="latency")
    if failed:
        ax_latency.scatter([r["sent_s"] for r in failed], [0.0] * len(failed), s=18, color="red", marker="v",
                           label=f"failed ({len(failed)})")  # fmt: skip
    ax_latency.set(xlabel="request sent (s after start)", ylabel="seconds", title="Each request")
    ax_stall.scatter([r["sent_s"] for r in ok], [r["max_stall_s"] or 0.0 for r in ok], s=12, color="tab:red")
    ax_stall.axhline(CONTINUITY_STALL_S, color="gray", linestyle=":", label="100 ms")
    ax_stall.set(xlabel="request sent (s after start)", ylabel="longest stall (s)", title="Playback stalls")
    for ax in (ax_latency, ax_stall):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(fig, path, title)
