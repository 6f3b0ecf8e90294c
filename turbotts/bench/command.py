"""``turbotts bench``: in-process load generation with a JSON report and a plot."""

from __future__ import annotations

import dataclasses
import gc
import os
import platform
import statistics
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from turbotts.bench.memory import peak_rss_bytes, reset_peak_rss
from turbotts.bench.report import summarize, write_json, write_plot
from turbotts.bench.roofline import (
    decode_weight_bytes,
    int8_kernel_name,
    int8_prefill_report,
    int8_tiles_huge_page_bytes,
    measure_bandwidth_bytes_per_s,
    measure_int8_kernel_cached_bytes_per_s,
    measure_read_bytes_per_s,
)
from turbotts.bench.runner import MODES, run_mode
from turbotts.bench.workload import BenchRequest, make_workload, parse_output_len
from turbotts.cli_options import (
    CheckpointOpt,
    DeviceOpt,
    DtypeOpt,
    DummySizeOpt,
    KeyEnvOpt,
    LoadFormatOpt,
    PublicKeyOpt,
    model_source,
)
from turbotts.config import DECODE_MODES, KV_DTYPES, EngineConfig, StreamingConfig
from turbotts.cpu.extensions import load_kernels
from turbotts.cpu.info import cpu_info
from turbotts.cpu.precision import resolve_precision
from turbotts.engine.model_runner import kv_cache_dtype
from turbotts.model.chattts import ChatTTSModel
from turbotts.model.loader import release_freed_memory
from turbotts.optional import require

PROBE_FRAMES = 48


def _list(spec: str, cast: type, name: str) -> list[Any]:
    try:
        values = [cast(v) for v in spec.split(",") if v.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"{name} takes a comma-separated list, got {spec!r}") from exc
    if not values:
        raise typer.BadParameter(f"{name} is empty")
    return values


def probe_batch1_step_s(model: ChatTTSModel, engine_config: EngineConfig) -> float:
    """Median decode-step time of one request alone (also warms the model up)."""
    probe = [BenchRequest(index=0, text="warm up the engine", num_frames=PROBE_FRAMES, arrival_s=0.0, seed=1)]
    result = run_mode(model, probe, "sequential", 1, engine_config=engine_config, is_closed_loop=True)
    return statistics.median(result.step_s_by_batch[1])


def bench(
    checkpoint: CheckpointOpt = None,
    load_format: LoadFormatOpt = "dummy",
    dummy_size: DummySizeOpt = "full",
    key_env: KeyEnvOpt = None,
    public_key: PublicKeyOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    quant: Annotated[
        str, typer.Option("--quant", help="none, int8, auto, or a comma list to compare (default: both).")
    ] = "none,auto",
    mode: Annotated[str, typer.Option("--mode", help="sequential, static, continuous (comma list).")] = "continuous",
    num_requests: Annotated[int, typer.Option("--num-requests", min=1)] = 16,
    concurrency: Annotated[str, typer.Option("--concurrency", help="Closed-loop clients (comma list).")] = "",
    request_rate: Annotated[float | None, typer.Option("--request-rate", help="Poisson arrivals per s.")] = None,
    output_len: Annotated[str, typer.Option("--output-len", help="Code frames per request: N or MIN:MAX.")] = "128",
    max_batch_size: Annotated[int, typer.Option("--max-batch-size", help="Batch cap for rate runs.")] = 16,
    kv_budget_mb: Annotated[int, typer.Option("--kv-budget-mb")] = 8192,
    vocoder_dtype: Annotated[
        str, typer.Option("--vocoder-dtype", help="auto, fp32 or bf16 (Decoder + Vocos).")
    ] = "auto",
    kv_dtype: Annotated[
        str, typer.Option("--kv-dtype", help="KV cache: auto (bf16 under the int8 decode stack), fp32 or bf16.")
    ] = "auto",
    max_chunk_frames: Annotated[int, typer.Option("--max-chunk-frames", help="Largest streamed chunk.")] = 96,
    first_chunk_frames: Annotated[
        int, typer.Option("--first-chunk-frames", help="Frames in the first streamed chunk.")
    ] = StreamingConfig.first_chunk_frames,
    first_chunk_lookahead_frames: Annotated[
        int, typer.Option("--first-chunk-lookahead-frames", help="Frames the first chunk waits for past its end.")
    ] = StreamingConfig.first_chunk_lookahead_frames,
    max_prefill_tokens: Annotated[
        int,
        typer.Option(
            "--max-prefill-tokens", min=1, help="Prompt tokens prefilled per step (lower: prefill spread over steps)."
        ),
    ] = EngineConfig.max_prefill_tokens,
    decode_mode: Annotated[
        str, typer.Option("--decode-mode", help="auto, eager, static or graphs (CUDA graphs, GPU only).")
    ] = "auto",
    stream: Annotated[
        bool,
        typer.Option(
            "--stream/--no-stream",
            help="Stream audio in chunks (default), or ask for each utterance whole: one decode at the end.",
        ),
    ] = True,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    json_path: Annotated[Path, typer.Option("--json", help="Where to write the report.")] = Path("bench.json"),
    plot_path: Annotated[Path | None, typer.Option("--plot", help="PNG of throughput and TTFA.")] = None,
) -> None:
    """Measure throughput, TTFA, latency and step times of the engine (JSON + optional PNG)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from turbotts.sources import load_model_gated

    if plot_path is not None:
        require("matplotlib", purpose="--plot")
    modes = _list(mode, str, "--mode")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise typer.BadParameter(f"--mode must be among {', '.join(MODES)}, not {', '.join(bad)}")
    if bool(concurrency) == (request_rate is not None):
        raise typer.BadParameter("pass exactly one of --concurrency or --request-rate")
    if request_rate is not None and request_rate <= 0:
        raise typer.BadParameter("--request-rate must be positive")
    try:
        lengths = parse_output_len(output_len)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    levels = _list(concurrency, int, "--concurrency") if concurrency else [max_batch_size]
    if any(c < 1 for c in levels):
        raise typer.BadParameter("--concurrency values must be at least 1")

    if vocoder_dtype not in ("auto", "fp32", "bf16"):
        raise typer.BadParameter("--vocoder-dtype must be auto, fp32 or bf16")
    quants = list(dict.fromkeys(_list(quant, str, "--quant")))
    for quant_mode in quants:  # a bad mode fails here, before any weights load
        resolve_precision(dtype, quant_mode, vocoder_dtype, device)
    source = model_source(checkpoint, load_format, dummy_size, key_env, public_key)
    try:
        streaming = StreamingConfig(
            max_chunk_frames=max(max_chunk_frames, StreamingConfig().chunk_frames),
            first_chunk_frames=first_chunk_frames,
            first_chunk_lookahead_frames=first_chunk_lookahead_frames,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if decode_mode not in DECODE_MODES:
        raise typer.BadParameter(f"--decode-mode must be one of {', '.join(DECODE_MODES)}")
    if kv_dtype not in KV_DTYPES:
        raise typer.BadParameter(f"--kv-dtype must be one of {', '.join(KV_DTYPES)}")
    base_config = EngineConfig(
        kv_budget_bytes=kv_budget_mb * 2**20,
        streaming=streaming,
        decode_mode=decode_mode,
        kv_dtype=kv_dtype,
        max_prefill_tokens=max_prefill_tokens,
    )
    bandwidth = measure_bandwidth_bytes_per_s()
    workload = make_workload(num_requests, lengths, request_rate, seed)
    runs: list[dict[str, Any]] = []
    probes: dict[str, dict[str, Any]] = {}
    is_dummy = True
    for quant_mode in quants:  # one model at a time, same workload: ratios come from one run
        is_peak_per_phase = reset_peak_rss()
        model, gated = load_model_gated(
            source, device=device, dtype=dtype, quant=quant_mode, vocoder_dtype=vocoder_dtype
        )
        precision = gated.precision
        engine_config = dataclasses.replace(base_config, vocoder_dtype=precision.vocoder_dtype)
        is_dummy = model.is_dummy
        mode_name = f"{precision.dtype}/{precision.quant}/vocoder {precision.vocoder_dtype}"
        if model.is_dummy:
            typer.echo(f"benchmarking random {dummy_size} weights ({mode_name}, on {precision.isa})", err=True)
        weight_bytes = decode_weight_bytes(model)
        batch1_step_s = probe_batch1_step_s(model, engine_config)
        load_peak_rss = peak_rss_bytes()  # before the read probe's weight-sized buffer, which is not the model's
        weight_read = measure_read_bytes_per_s(weight_bytes)
        # the kernel's own floor on cached weights, for int8 models that run it (None otherwise)
        runs_int8_kernel = int8_kernel_name(model) not in (None, "fbgemm")
        cached_rate = measure_int8_kernel_cached_bytes_per_s() if runs_int8_kernel else None
        probes[quant_mode] = {
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
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
            for run_mode_name in modes:
                for level in levels:
                    task = bar.add_task(f"{quant_mode} {run_mode_name} c={level}", total=len(workload))
                    reset_peak_rss()
                    result = run_mode(
                        model,
                        workload,
                        run_mode_name,
                        level,
                        engine_config=engine_config,
                        is_closed_loop=request_rate is None,
                        on_finish=partial(bar.advance, task),
                        is_streaming=stream,
                    )
                    labels = {"quant": quant_mode, "precision": mode_name, "peak_rss_bytes": peak_rss_bytes()}
                    runs.append({**summarize(result), **labels})
        run_peaks = [r["peak_rss_bytes"] for r in runs if r["quant"] == quant_mode]
        probes[quant_mode]["peak_rss_bytes"] = max([probes[quant_mode]["load_peak_rss_bytes"], *run_peaks])
        del model
        # hand the freed model back to the OS before the next one loads: glibc keeps a freed model's heap
        # resident (about 1.3 GB at full size), which the next precision's peak would otherwise be charged with
        gc.collect()
        release_freed_memory()
    report: dict[str, Any] = dict(runs[0])
    report.update(
        {
            "runs": runs,
            "ratios": _ratios(runs),
            **probes[quants[0]],
            # each precision's own peak (load and its runs): the largest of them, not the process's lifetime
            "peak_rss_bytes": max(probe["peak_rss_bytes"] for probe in probes.values()),
            "peak_rss_is_per_precision": is_peak_per_phase,
            "probes_by_quant": probes,
            "memory_bandwidth_gb_s": bandwidth / 1e9,
            "config": {
                "checkpoint": str(checkpoint) if checkpoint else None,
                "load_format": load_format,
                "dummy_size": dummy_size,
                "device": device,
                "dtype": dtype,
                "quant": quant,
                "vocoder_dtype": vocoder_dtype,
                "max_chunk_frames": streaming.max_chunk_frames,
                "first_chunk_frames": streaming.first_chunk_frames,
                "first_chunk_lookahead_frames": streaming.first_chunk_lookahead_frames,
                "max_prefill_tokens": max_prefill_tokens,
                "is_streaming": stream,
                "decode_mode": decode_mode,
                "num_requests": num_requests,
                "concurrency": levels,
                "request_rate": request_rate,
                "output_len": list(lengths),
                "seed": seed,
                "is_dummy": is_dummy,
            },
            "machine": {
                "cpu": cpu_info().report(),
                "cpu_kernels": load_kernels().report(),
                "cpu_count": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
        }
    )
    write_json(report, json_path)
    if plot_path is not None:
        write_plot(runs, plot_path, f"TurboTTS bench ({dummy_size if is_dummy else 'checkpoint'}, {dtype})")
    _print_summary(runs, report)


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


def _print_summary(runs: list[dict[str, Any]], report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="TurboTTS bench")
    for column in ("mode", "conc", "audio s/s", "TTFA p50", "TTFA p99", "latency p50", "latency p99"):
        table.add_column(column)
    for r in runs:
        table.add_row(
            r["mode"],
            str(r["concurrency"]),
            f"{r['throughput_audio_s_per_s']:.2f}",
            f"{r['ttfa_s']['p50']:.3f}",
            f"{r['ttfa_s']['p99']:.3f}",
            f"{r['latency_s']['p50']:.2f}",
            f"{r['latency_s']['p99']:.2f}",
        )
    console = Console(stderr=True)
    console.print(table)
    console.print(
        f"batch-1 step {report['batch1_step_ms']:.1f} ms, roofline {report['roofline_step_ms']:.1f} ms "
        f"(ratio {report['roofline_ratio']:.2f}, bandwidth {report['memory_bandwidth_gb_s']:.1f} GB/s); "
        f"ratios {report['ratios']}"
    )
    if report["weight_size_read_gb_s"] is not None:
        console.print(
            f"a plain read of the weights' size: {report['weight_size_read_gb_s']:.1f} GB/s "
            f"(batch-1 step {report['weight_size_read_ratio']:.2f}x that)"
        )
    if report.get("int8_kernel_cached_gb_s") is not None:
        console.print(
            f"the int8 kernel on cached weights: {report['int8_kernel_cached_gb_s']:.1f} GB/s "
            f"(batch-1 step {report['int8_kernel_cached_ratio']:.2f}x that)"
        )
