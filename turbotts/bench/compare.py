"""Same-machine ratios of TurboTTS over the official package: ``python -m turbotts.bench.compare``.

Reads the official side's phase files (``phase_seq8.json``, ``phase_batch8.json``,
``phase_stream.json`` from ``../shared/official-bench/bench_official.py``) and the
``turbotts bench`` reports made on the same checkpoint and workload (streamed, and
optionally one with ``--no-stream``: whole utterances, as the official static batch
returns them), and writes the ratios as JSON and a PNG. Figures from different machines are never mixed:
both sides must come from one run of ``benchmarks/compare_official.sh``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from turbotts.bench.figures import new_figure, save_figure


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _best(runs: list[dict[str, Any]], mode: str, concurrency: int) -> dict[str, Any] | None:
    """The fastest run of ``mode`` at ``concurrency`` over the quant modes the bench compared."""
    rows = [r for r in runs if r["mode"] == mode and r["concurrency"] == concurrency]
    return max(rows, key=lambda r: r["throughput_audio_s_per_s"]) if rows else None


def _peak_rss_mib_by_quant(reports: list[dict[str, Any]]) -> dict[str, float]:
    """Each quant mode's peak RSS over the reports (a bench run measures each mode's load and runs)."""
    peaks: dict[str, float] = {}
    for report in reports:
        for quant, probe in report["probes_by_quant"].items():
            peaks[quant] = max(peaks.get(quant, 0.0), probe["peak_rss_bytes"] / 2**20)
    return peaks


def compare(official_dir: Path, turbotts_jsons: list[Path], concurrency: int) -> dict[str, Any]:
    """The comparison document: both sides' figures and TurboTTS / official ratios."""
    seq, batch, stream = (_load(official_dir / f"phase_{p}.json") for p in ("seq8", "batch8", "stream"))
    reports = [_load(path) for path in turbotts_jsons]
    ours = reports[-1]
    # streamed runs make the headline ratios; runs that asked for whole utterances (bench --no-stream) are
    # compared on their own: the official static batch also returns each utterance whole
    is_streamed = [report.get("config", {}).get("is_streaming", True) for report in reports]
    runs = [run for report, streamed in zip(reports, is_streamed, strict=True) if streamed for run in report["runs"]]
    whole_runs = [run for report, s in zip(reports, is_streamed, strict=True) if not s for run in report["runs"]]
    peak_rss_mib = _peak_rss_mib_by_quant(reports)
    official = {
        "sequential_audio_s_per_s": seq["throughput_audio_s_per_wall_s"],
        "static_batch_audio_s_per_s": batch["throughput_audio_s_per_wall_s"],
        "static_batch_size": batch["batch"],
        "stream_ttfa_s": stream["ttfc_s"],
        "static_batch_peak_rss_mib": batch["rss_end"]["VmHWM"],
    }
    turbo: dict[str, Any] = {}
    for mode in ("sequential", "static", "continuous"):
        level = 1 if mode == "sequential" else concurrency
        best = _best(runs, mode, level)
        if best is not None:
            turbo[mode] = {"audio_s_per_s": best["throughput_audio_s_per_s"], "precision": best.get("precision"),
                           "ttfa_p50_s": best["ttfa_s"]["p50"]}  # fmt: skip
    whole = _best(whole_runs, "continuous", concurrency)
    if whole is not None:
        turbo["continuous_whole"] = {
            "audio_s_per_s": whole["throughput_audio_s_per_s"],
            "precision": whole.get("precision"),
            "latency_p50_s": whole["latency_s"]["p50"],
        }
    lone = _best(runs, "sequential", 1)
    best = _best(runs, "continuous", concurrency) or _best(runs, "static", concurrency) or lone
    # the memory of the mode the throughput ratio is for, each mode's own peak (load and its runs)
    best_peak_mib = peak_rss_mib[best["quant"]] if best else max(peak_rss_mib.values())
    ratios = {
        "continuous_over_official_static": turbo["continuous"]["audio_s_per_s"] / official["static_batch_audio_s_per_s"]
        if "continuous" in turbo else None,
        "static_over_official_static": turbo["static"]["audio_s_per_s"] / official["static_batch_audio_s_per_s"]
        if "static" in turbo else None,
        "continuous_whole_over_official_static": turbo["continuous_whole"]["audio_s_per_s"]
        / official["static_batch_audio_s_per_s"] if whole is not None else None,
        "sequential_over_official_sequential": turbo["sequential"]["audio_s_per_s"]
        / official["sequential_audio_s_per_s"] if "sequential" in turbo else None,
        "lone_ttfa_official_over_turbotts": official["stream_ttfa_s"] / lone["ttfa_s"]["p50"]
        if lone and lone["ttfa_s"]["p50"] else None,
        "peak_rss_turbotts_over_official": best_peak_mib / official["static_batch_peak_rss_mib"],
        "peak_rss_any_mode_over_official": max(peak_rss_mib.values()) / official["static_batch_peak_rss_mib"],
    }  # fmt: skip
    return {
        "machine": ours["machine"],
        "official": official,
        "turbotts": turbo,
        "turbotts_peak_rss_mib": best_peak_mib,
        "turbotts_peak_rss_mib_by_quant": peak_rss_mib,
        # each report's probes, keyed "<file stem>:<quant>" (the script runs each precision in its own process)
        "turbotts_probes": {
            f"{path.stem}:{quant}": probe
            for path, report in zip(turbotts_jsons, reports, strict=True)
            for quant, probe in report["probes_by_quant"].items()
        },
        "ratios": ratios,
        "concurrency": concurrency,
    }


def plot(document: dict[str, Any], path: Path) -> None:
    fig, (ax_tp, ax_other) = new_figure(2, (11, 4.2))
    official, turbo = document["official"], document["turbotts"]
    names = ["sequential", "static", "continuous", *(["continuous_whole"] if "continuous_whole" in turbo else [])]
    values = [official["sequential_audio_s_per_s"], official["static_batch_audio_s_per_s"], 0.0, 0.0][: len(names)]
    ours = [turbo.get(n, {}).get("audio_s_per_s", 0.0) for n in names]
    xs = range(len(names))
    ax_tp.bar([x - 0.2 for x in xs], values, width=0.4, label="official 0.2.5")
    ax_tp.bar([x + 0.2 for x in xs], ours, width=0.4, label="TurboTTS (best mode)")
    ax_tp.set_xticks(list(xs), [name.replace("_", "\n") for name in names])
    ax_tp.set(ylabel="audio seconds per wall second", title=f"Throughput (c={document['concurrency']})")
    ax_tp.legend(fontsize=8)
    ratios = document["ratios"]
    labels = [k for k, v in ratios.items() if v is not None]
    ax_other.barh(labels, [ratios[k] for k in labels])
    ax_other.axvline(1.0, color="gray", lw=0.8)
    ax_other.set(title="TurboTTS over official (RSS: lower is better)")
    isa = document["machine"].get("cpu", {}).get("isa", "?")
    save_figure(fig, path, f"TurboTTS vs official ChatTTS, same machine ({isa})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--official-dir", type=Path, required=True)
    parser.add_argument("--turbotts-json", type=Path, nargs="+", required=True, help="bench reports (lone, c=16)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--plot", type=Path, required=True)
    args = parser.parse_args()
    document = compare(args.official_dir, args.turbotts_json, args.concurrency)
    args.json.write_text(json.dumps(document, indent=1))
    plot(document, args.plot)
    print(json.dumps(document["ratios"], indent=1))


if __name__ == "__main__":
    main()
