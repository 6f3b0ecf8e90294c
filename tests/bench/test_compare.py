"""The official-vs-TurboTTS document charges memory to the mode its throughput ratio is for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from turbotts.bench.compare import compare

MIB = 2**20


def _run(quant: str, mode: str, concurrency: int, throughput: float) -> dict[str, Any]:
    return {"quant": quant, "mode": mode, "concurrency": concurrency, "precision": quant,
            "throughput_audio_s_per_s": throughput, "ttfa_s": {"p50": 0.5}, "latency_s": {"p50": 9.0}}  # fmt: skip


def _report(runs: list[dict[str, Any]], peaks_mib: dict[str, int]) -> dict[str, Any]:
    probes = {q: {"peak_rss_bytes": mib * MIB} for q, mib in peaks_mib.items()}
    return {"runs": runs, "probes_by_quant": probes, "peak_rss_bytes": max(peaks_mib.values()) * MIB,
            "machine": {"cpu": {"isa": "avx2"}}}  # fmt: skip


def test_peak_rss_ratio_is_the_best_continuous_modes_own_peak(tmp_path: Path) -> None:
    official = tmp_path / "official"
    official.mkdir()
    phases = {
        "seq8": {"throughput_audio_s_per_wall_s": 0.5},
        "batch8": {"throughput_audio_s_per_wall_s": 2.0, "batch": 16, "rss_end": {"VmHWM": 2000.0}},
        "stream": {"ttfc_s": 4.0},
    }
    for name, doc in phases.items():
        (official / f"phase_{name}.json").write_text(json.dumps(doc))
    lone = _report(
        [_run("none", "sequential", 1, 0.6), _run("auto", "sequential", 1, 1.5)], {"none": 1800, "auto": 1500}
    )
    c16 = _report(
        [_run("none", "continuous", 16, 3.0), _run("auto", "continuous", 16, 6.0)], {"none": 2600, "auto": 1600}
    )
    whole = _report([_run("auto", "continuous", 16, 7.0)], {"auto": 1500})
    whole["config"] = {"is_streaming": False}  # bench --no-stream: utterances asked for whole
    paths = []
    for name, report in (("lone", lone), ("c16", c16)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(report))

    document = compare(official, paths, 16)
    assert document["ratios"]["continuous_whole_over_official_static"] is None  # no --no-stream report given
    (tmp_path / "whole.json").write_text(json.dumps(whole))
    document = compare(official, [*paths, tmp_path / "whole.json"], 16)

    ratios = document["ratios"]
    assert ratios["continuous_over_official_static"] == 3.0  # auto's streamed 6.0 over 2.0, not the whole 7.0
    assert ratios["continuous_whole_over_official_static"] == 3.5  # like for like: both return utterances whole
    assert document["turbotts"]["continuous_whole"]["latency_p50_s"] == 9.0
    assert document["turbotts_peak_rss_mib_by_quant"] == {"none": 2600, "auto": 1600}
    assert ratios["peak_rss_turbotts_over_official"] == 1600 / 2000  # auto's own peak, not bf16's
    assert ratios["peak_rss_any_mode_over_official"] == 2600 / 2000
    assert ratios["lone_ttfa_official_over_turbotts"] == 4.0 / 0.5
