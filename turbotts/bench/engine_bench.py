"""The work behind ``turbotts bench``: each precision loaded in turn, probed, run through every mode and load.

Kept apart from the command line (:mod:`turbotts.bench.command`, options and printing) so the runs and
the report they make can be read, and called, without typer.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turbotts.bench.memory import peak_rss_bytes, reset_peak_rss
from turbotts.bench.report import summarize
from turbotts.bench.roofline import (
    decode_weight_bytes,
    int8_kernel_name,
    int8_prefill_report,
    int8_tiles_huge_page_bytes,
    measure_int8_kernel_cached_bytes_per_s,
    measure_read_bytes_per_s,
)
from turbotts.bench.runner import run_mode
from turbotts.bench.workload import BenchRequest
from turbotts.config import EngineConfig
from turbotts.cpu.extensions import load_kernels
from turbotts.cpu.info import cpu_info
from turbotts.engine.decode_path import kv_cache_dtype
from turbotts.fidelity.gate import GatedPrecision
from turbotts.model.chattts import ChatTTSModel
from turbotts.model.loader import release_freed_memory
from turbotts.sources import ModelSource

PROBE_FRAMES = 48

#: given a run's label and its number of requests, the callback to call as each request finishes
OnRun = Callable[[str, int], Callable[[], None]]


@dataclass(frozen=True)
class BenchPlan:
    """What to run: the same workload for every precision, mode and load level."""

    source: ModelSource
    device: str
    dtype: str
    quants: list[str]
    vocoder_dtype: str
    kv_dtype: str
    modes: list[str]
    levels: list[int]
    request_rate: float | None
    is_streaming: bool
    engine_config: EngineConfig
    workload: list[BenchRequest]


@dataclass
class BenchResults:
    """Every run's summary, and each precision's probes (step time, roofline, memory, kernels)."""

    runs: list[dict[str, Any]]
    probes: dict[str, dict[str, Any]]
    is_dummy: bool
    is_peak_rss_per_precision: bool


def probe_batch1_step_s(model: ChatTTSModel, engine_config: EngineConfig) -> float:
    """Median decode-step time of one request alone (also warms the model up)."""
    probe = [BenchRequest(index=0, text="warm up the engine", num_frames=PROBE_FRAMES, arrival_s=0.0, seed=1)]
    result = run_mode(model, probe, "sequential", 1, engine_config=engine_config, is_closed_loop=True)
    return statistics.median(result.step_s_by_batch[1])


def run_precisions(
    plan: BenchPlan, bandwidth_bytes_per_s: float, on_run: OnRun, echo: Callable[[str], None]
) -> BenchResults:
    """Load each precision of ``plan`` in turn (one model in memory at a time) and run the workload on it."""
    from turbotts.sources import load_model_gated

    runs: list[dict[str, Any]] = []
    probes: dict[str, dict[str, Any]] = {}
    is_dummy, is_peak_per_phase = True, False
    for quant_mode in plan.quants:  # one model at a time, same workload: ratios come from one run
        is_peak_per_phase = reset_peak_rss()
        model, gated = load_model_gated(
            plan.source, device=plan.device, dtype=plan.dtype, quant=quant_mode, vocoder_dtype=plan.vocoder_dtype
        )
        precision = gated.precision
        engine_config = dataclasses.replace(plan.engine_config, vocoder_dtype=precision.vocoder_dtype)
        is_dummy = model.is_dummy
        mode_name = f"{precision.dtype}/{precision.quant}/vocoder {precision.vocoder_dtype}"
        if model.is_dummy:
            echo(f"benchmarking random {plan.source.dummy_size} weights ({mode_name}, on {precision.isa})")
        probes[quant_mode] = _probe(model, gated, engine_config, plan.kv_dtype, bandwidth_bytes_per_s)
        for run_mode_name in plan.modes:
            for level in plan.levels:
                reset_peak_rss()
                result = run_mode(
                    model,
                    plan.workload,
                    run_mode_name,
                    level,
                    engine_config=engine_config,
                    is_closed_loop=plan.request_rate is None,
                    on_finish=on_run(f"{quant_mode} {run_mode_name} c={level}", len(plan.workload)),
                    is_streaming=plan.is_streaming,
                )
                labels = {"quant": quant_mode, "precision": mode_name, "peak_rss_bytes": peak_rss_bytes()}
                runs.append({**summarize(result), **labels})
        run_peaks = [r["peak_rss_bytes"] for r in runs if r["quant"] == quant_mode]
        probes[quant_mode]["peak_rss_bytes"] = max([probes[quant_mode]["load_peak_rss_bytes"], *run_peaks])
        del model
        # hand the freed model back to the OS before the next one loads: glibc keeps a freed model's heap
        # resident, which the next precision's peak would otherwise be charged with
        gc.collect()
        release_freed_memory()
    return BenchResults(runs, probes, is_dummy, is_peak_per_phase)


def _probe(
    model: ChatTTSModel, gated: GatedPrecision, engine_config: EngineConfig, kv_dtype: str, bandwidth: float
) -> dict[str, Any]:
    """One precision's batch-1 step against its rooflines, with what it runs on and what it holds."""
    weight_bytes = decode_weight_bytes(model)
    batch1_step_s = probe_batch1_step_s(model, engine_config)
    load_peak_rss = peak_rss_bytes()  # before the read probe's weight-sized buffer, which is not the model's
    weight_read = measure_read_bytes_per_s(weight_bytes)
    # the kernel's own floor on cached weights, for int8 models that run it (None otherwise)
    runs_int8_kernel = int8_kernel_name(model) not in (None, "fbgemm")
    cached_rate = measure_int8_kernel_cached_bytes_per_s() if runs_int8_kernel else None
    return {
        "precision": gated.report(),
        "cpu_kernels": load_kernels().report(),
        "batch1_step_ms": 1000 * batch1_step_s,
        "roofline_step_ms": 1000 * weight_bytes / bandwidth,
        "roofline_ratio": batch1_step_s * bandwidth / weight_bytes,
        # the stricter yardstick: a plain read of a weight-sized buffer (None without the compiled kernels)
        "weight_size_read_gb_s": None if weight_read is None else weight_read / 1e9,
        "weight_size_read_ratio": None if weight_read is None else batch1_step_s * weight_read / weight_bytes,
        "int8_kernel_cached_gb_s": None if cached_rate is None else cached_rate / 1e9,
        "int8_kernel_cached_ratio": None if cached_rate is None else batch1_step_s * cached_rate / weight_bytes,
        "decode_weight_bytes": weight_bytes,
        "int8_kernel": int8_kernel_name(model),
        "int8_tiles_huge_page_bytes": int8_tiles_huge_page_bytes(model),
        "int8_prefill": int8_prefill_report(model),
        "kv_dtype": str(kv_cache_dtype(kv_dtype, model.modules.gpt)).removeprefix("torch."),
        "load_peak_rss_bytes": load_peak_rss,
    }


def build_report(
    results: BenchResults, first_quant: str, bandwidth_bytes_per_s: float, config: dict[str, Any]
) -> dict[str, Any]:
    """The ``bench`` JSON: the first run's summary at the top, then every run, ratios, probes and the machine."""
    runs, probes = results.runs, results.probes
    report: dict[str, Any] = dict(runs[0])
    report.update(
        {
            "runs": runs,
            "ratios": _ratios(runs),
            **probes[first_quant],
            # each precision's own peak (load and its runs): the largest of them, not the process's lifetime
            "peak_rss_bytes": max(probe["peak_rss_bytes"] for probe in probes.values()),
            "peak_rss_is_per_precision": results.is_peak_rss_per_precision,
            "probes_by_quant": probes,
            "memory_bandwidth_gb_s": bandwidth_bytes_per_s / 1e9,
            "config": {**config, "is_dummy": results.is_dummy},
            "machine": {
                "cpu": cpu_info().report(),
                "cpu_kernels": load_kernels().report(),
                "cpu_count": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
        }
    )
    return report


def _ratios(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Throughput ratios from this one run: continuous over the other modes (per
    quant mode, equal concurrency), and each quant mode over the first one."""
    by_key = {(r["quant"], r["mode"], r["concurrency"]): r["throughput_audio_s_per_s"] for r in runs}
    first_quant = runs[0]["quant"]
    ratios = {}
    for (quant, mode, level), value in by_key.items():
        prefix = "" if quant == first_quant else f"{quant}_"
        if mode == "continuous":
            for other in ("sequential", "static"):
                base = by_key.get((quant, other, level))
                if base:
                    ratios[f"{prefix}continuous_over_{other}_c{level}"] = value / base
        base = by_key.get((first_quant, mode, level))
        if quant != first_quant and base:
            ratios[f"{quant}_over_{first_quant}_{mode}_c{level}"] = value / base
    return ratios
