"""``turbotts bench``: in-process load generation with a JSON report and a plot.

The command line only: options, their checks, and the printed summary. The runs and the report are
:mod:`turbotts.bench.engine_bench`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from turbotts.bench.report import write_json, write_plot
from turbotts.bench.workload import MODES, make_workload, parse_output_len
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
from turbotts.optional import require


def _list(spec: str, cast: type, name: str) -> list[Any]:
    try:
        values = [cast(v) for v in spec.split(",") if v.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"{name} takes a comma-separated list, got {spec!r}") from exc
    if not values:
        raise typer.BadParameter(f"{name} is empty")
    return values


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
    from turbotts.bench.engine_bench import BenchPlan, build_report, run_precisions  # torch from here on
    from turbotts.bench.roofline import measure_bandwidth_bytes_per_s
    from turbotts.cpu.precision import resolve_precision

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
    plan = BenchPlan(
        source=source,
        device=device,
        dtype=dtype,
        quants=quants,
        vocoder_dtype=vocoder_dtype,
        kv_dtype=kv_dtype,
        modes=modes,
        levels=levels,
        request_rate=request_rate,
        is_streaming=stream,
        engine_config=base_config,
        workload=make_workload(num_requests, lengths, request_rate, seed),
    )
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:

        def on_run(label: str, total: int) -> Callable[[], None]:
            return partial(bar.advance, bar.add_task(label, total=total))

        results = run_precisions(plan, bandwidth, on_run, partial(typer.echo, err=True))
    config = {
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
    }
    report = build_report(results, quants[0], bandwidth, config)
    write_json(report, json_path)
    if plot_path is not None:
        label = dummy_size if results.is_dummy else "checkpoint"
        write_plot(results.runs, plot_path, f"TurboTTS bench ({label}, {dtype})")
    _print_summary(results.runs, report)


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
