"""``turbotts bench-steps``: decode step time by batch size against the weight-bytes roofline (JSON + PNG).

The command line, the report and the plot; the measurements are :mod:`turbotts.bench.step_profile`'s.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from turbotts.bench.figures import new_figure, save_figure
from turbotts.bench.report import write_json
from turbotts.cli_options import CheckpointOpt, DeviceOpt, DtypeOpt, DummySizeOpt, LoadFormatOpt, fail, model_source
from turbotts.cpu.info import cpu_info
from turbotts.optional import require

DEFAULT_BATCH_SIZES = "1,2,3,4,6,8,12,16"


def _batch_sizes(spec: str) -> list[int]:
    try:
        sizes = [int(v) for v in spec.split(",") if v.strip()]
    except ValueError:
        raise fail(f"--batch-sizes takes a comma-separated list of integers, got {spec!r}") from None
    if not sizes or min(sizes) < 1:
        raise fail(f"--batch-sizes needs batch sizes of at least 1, got {spec!r}")
    return sorted(set(sizes))


def cpu_identity() -> dict[str, Any]:
    """The CPU's model name, family, model number and the ISA flags that matter, for every figure quoted."""
    fields: dict[str, Any] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="ignore")
    except OSError:
        text = ""
    for key, name in (("cpu family", "family"), ("model", "model_number")):
        match = re.search(rf"^{key}\s*:\s*(\S+)", text, re.MULTILINE)
        fields[name] = match.group(1) if match else None
    return {**cpu_info().report(), **fields}


def bench_steps(
    checkpoint: CheckpointOpt = None,
    load_format: LoadFormatOpt = "dummy",
    dummy_size: DummySizeOpt = "full",
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    quant: Annotated[
        str, typer.Option("--quant", help="GPT weights: int8 (the path profiled), auto or none.")
    ] = "int8",
    vocoder_dtype: Annotated[str, typer.Option("--vocoder-dtype", help="auto (as serve), fp32 or bf16.")] = "auto",
    batch_sizes: Annotated[str, typer.Option("--batch-sizes", help="Comma list.")] = DEFAULT_BATCH_SIZES,
    num_steps: Annotated[int, typer.Option("--steps", help="Timed decode steps per batch size a round.")] = 8,
    num_warmup_steps: Annotated[int, typer.Option("--warmup-steps", help="Untimed steps first.")] = 4,
    num_rounds: Annotated[int, typer.Option("--rounds", help="Passes over the batch sizes (steps pooled).")] = 6,
    num_vocoder_frames: Annotated[
        int, typer.Option("--vocoder-frames", help="Frames of the streamed utterance the vocoder decodes.")
    ] = 128,
    num_vocoder_repeats: Annotated[
        int, typer.Option("--vocoder-repeats", help="Calls per window; the fastest counts.")
    ] = 3,
    json_path: Annotated[Path, typer.Option("--json", help="Where to write the report.")] = Path("step_profile.json"),
    plot_path: Annotated[Path | None, typer.Option("--plot", help="PNG: step ms and frames/s by batch.")] = None,
) -> None:
    """Time pure decode steps by batch size (int8 path) and the vocoder's cost per frame, against the roofline."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from turbotts.bench.roofline import decode_weight_bytes, measure_bandwidth_bytes_per_s, measure_read_bytes_per_s
    from turbotts.bench.step_profile import FRAMES_PER_S_PER_STREAM, StepProfilePlan, batch_row, run_profile
    from turbotts.cpu.extensions import load_kernels
    from turbotts.cpu.precision import resolve_precision
    from turbotts.sources import load_model_gated

    if plot_path is not None:
        require("matplotlib", purpose="--plot")
    sizes = _batch_sizes(batch_sizes)
    try:
        plan = StepProfilePlan(sizes, num_steps, num_warmup_steps, num_vocoder_frames, num_rounds, num_vocoder_repeats)
        resolve_precision(dtype, quant, vocoder_dtype, device)  # a bad mode fails before any weights load
    except ValueError as exc:
        raise fail(str(exc)) from None
    source = model_source(checkpoint, load_format, dummy_size)
    model, gated = load_model_gated(source, device=device, dtype=dtype, quant=quant, vocoder_dtype=vocoder_dtype)
    weight_bytes = decode_weight_bytes(model)
    sum_bandwidth = measure_bandwidth_bytes_per_s()
    read_bandwidth = measure_read_bytes_per_s(weight_bytes)
    bandwidth = read_bandwidth if read_bandwidth is not None else sum_bandwidth
    floor_s = weight_bytes / bandwidth
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns) as bar:
        steps_task = bar.add_task("decode steps", total=len(sizes) * num_steps * num_rounds)
        windows_task = bar.add_task("vocoder windows", total=None)
        profile = run_profile(
            model,
            plan,
            gated.precision.vocoder_dtype,
            on_step=lambda: bar.advance(steps_task),
            on_window=lambda: bar.advance(windows_task),
        )
    kv_bytes_per_token = model.modules.gpt.kv_bytes_per_token(profile.kv_dtype)
    vocoder = profile.vocoder_s_per_frame
    rows = [batch_row(s, vocoder[s.batch_size], weight_bytes, kv_bytes_per_token, bandwidth) for s in profile.steps]
    report = {
        "batches": rows,
        "roofline": {
            "decode_weight_bytes": weight_bytes,
            "floor_step_ms": 1000 * floor_s,
            "bandwidth_gb_s": bandwidth / 1e9,
            "bandwidth_source": "weight-size read loop" if read_bandwidth is not None else "1 GiB torch sum",
            "sum_probe_gb_s": sum_bandwidth / 1e9,
            "weight_size_read_gb_s": None if read_bandwidth is None else read_bandwidth / 1e9,
        },
        "realtime_frames_per_s_per_stream": FRAMES_PER_S_PER_STREAM,
        "precision": gated.report(),
        "vocoder_dtype": profile.vocoder_dtype,
        "kv_dtype": str(profile.kv_dtype).removeprefix("torch."),
        "config": {
            "checkpoint": str(checkpoint) if checkpoint else None,
            "load_format": load_format,
            "dummy_size": dummy_size,
            "is_dummy": model.is_dummy,
            "batch_sizes": sizes,
            "num_steps": num_steps,
            "num_warmup_steps": num_warmup_steps,
            "num_rounds": num_rounds,
            "num_vocoder_repeats": num_vocoder_repeats,
            "num_vocoder_frames": num_vocoder_frames,
            "streaming": dataclasses.asdict(plan.streaming),
        },
        "machine": {
            "cpu": cpu_identity(),
            "cpu_kernels": load_kernels().report(),
            "cpu_count": os.cpu_count(),
            # a shared machine's other work shows here: 1, 5 and 15 minute run-queue averages at the end
            "load_average": list(os.getloadavg()),
            "platform": platform.platform(),
        },
    }
    write_json(report, json_path)
    if plot_path is not None:
        write_step_plot(report, plot_path)
    _print_table(report)


def write_step_plot(report: dict[str, Any], path: Path) -> None:
    """Left: step ms (p50, fastest) and the roofline floors by batch. Right: frames/s against the real-time line."""
    rows = report["batches"]
    sizes = [r["batch_size"] for r in rows]
    fig, (ax_step, ax_rate) = new_figure(2, (11, 4.2))
    ax_step.plot(sizes, [r["step_ms"]["p50"] for r in rows], "o-", label="step p50")
    # the fastest step, not p90: on a shared machine one descheduled step sets p90 and the scale
    ax_step.plot(sizes, [r["step_ms"]["min"] for r in rows], ".--", label="fastest step")
    ax_step.axhline(report["roofline"]["floor_step_ms"], color="grey", linestyle=":", label="weight-bytes floor")
    floor_kv_ms = [r["step_ms"]["p50"] / r["x_roofline_with_kv"] for r in rows]
    ax_step.plot(sizes, floor_kv_ms, color="grey", linestyle="--", label="weights + KV floor")
    ax_step.set(xlabel="batch size (rows per step)", ylabel="ms per decode step", ylim=(0, None))
    ax_step.legend()
    ax_rate.plot(sizes, [r["frames_per_s"] for r in rows], "o-", label="GPT frames/s")
    ax_rate.plot(sizes, [r["frames_per_s_with_vocoder"] for r in rows], "s-", label="with vocoder")
    ax_rate.plot(sizes, [r["realtime_frames_per_s"] for r in rows], "k:", label="real time (b x 46.875)")
    ax_rate.set(xlabel="batch size (streams)", ylabel="code frames per second", ylim=(0, None))
    ax_rate.legend()
    cpu = report["machine"]["cpu"]
    label = report["config"]["dummy_size"] if report["config"]["is_dummy"] else "checkpoint"
    save_figure(fig, path, f"Decode step by batch ({label}, {cpu['model']})")


def _print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Decode step by batch size")
    for column in ("batch", "path", "step p50 ms", "p90 ms", "x roofline", "frames/s", "vocoder ms/frame", "real time"):
        table.add_column(column)
    for r in report["batches"]:
        table.add_row(
            str(r["batch_size"]),
            r["int8_path"],
            f"{r['step_ms']['p50']:.2f}",
            f"{r['step_ms']['p90']:.2f}",
            f"{r['x_roofline']:.2f}",
            f"{r['frames_per_s']:.0f}",
            f"{r['vocoder_ms_per_frame']:.2f}",
            "yes" if r["is_realtime"] else "no",
        )
    console = Console(stderr=True)
    console.print(table)
    roof = report["roofline"]
    console.print(
        f"floor {roof['floor_step_ms']:.2f} ms: {roof['decode_weight_bytes'] / 1e6:.0f} MB at "
        f"{roof['bandwidth_gb_s']:.1f} GB/s ({roof['bandwidth_source']})"
    )
