"""``turbotts quant-sweep``: quality, speed and memory of each precision mode against fp32.

Each mode runs in its own process (:mod:`turbotts.quality.probe`); fp32 runs
first and fixes the codes every other mode is teacher-forced on.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from turbotts.bench.figures import new_figure, save_figure
from turbotts.cli_options import CheckpointOpt, DummySizeOpt, KeyEnvOpt, LoadFormatOpt, PublicKeyOpt, model_source
from turbotts.optional import require

if TYPE_CHECKING:  # torch and the model come with the probe: loaded when the sweep runs, not with the CLI
    from turbotts.quality.probe import ProbeSpec

# mode name -> (GPT dtype, quant)
MODES: dict[str, tuple[str, str]] = {
    "fp32": ("fp32", "none"),
    "bf16": ("bf16", "none"),
    "fp16": ("fp16", "none"),
    "int8": ("fp32", "int8"),
}
REFERENCE = "fp32"
DEFAULT_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "今天天气很好，我们一起去公园散步吧。",
    "Please call me back at five thirty tomorrow afternoon.",
)
CSV_KEYS = (
    "mode",
    "weight_bytes",
    "step_ms_batch1",
    "step_ms_batch16",
    "code_agreement",
    "kl",
    "mcd_db",
    "rss_after_load_bytes",
    "peak_rss_bytes",
)


def parse_modes(spec: str) -> list[str]:
    modes = [m.strip() for m in spec.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise typer.BadParameter(f"--modes takes a comma list of {', '.join(MODES)}, got {spec!r}")
    return [REFERENCE] + [m for m in dict.fromkeys(modes) if m != REFERENCE]


def run_probe_process(spec: ProbeSpec, workdir: Path, name: str) -> dict[str, Any]:
    """Run one probe in a fresh interpreter and load its results."""
    import torch

    spec_path, out_path = workdir / f"{name}.json", workdir / f"{name}.pt"
    spec_path.write_text(json.dumps(spec.__dict__))
    done = subprocess.run(
        [sys.executable, "-m", "turbotts.quality.probe", str(spec_path), str(out_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {name} probe failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = torch.load(out_path)
    return result


def compare(reference: dict[str, Any], probe: dict[str, Any]) -> dict[str, Any]:
    """The mode's figures against the reference run on the same inputs."""
    import torch

    from turbotts.fidelity.agreement import code_agreement, mean_kl
    from turbotts.fidelity.mcd import mcd_db

    rate = reference["sample_rate_hz"]
    ref_logits = torch.cat([t["logits"] for t in reference["texts"]])  # (sum T, num_vq, V)
    logits = torch.cat([t["logits"] for t in probe["texts"]])
    mcds = [
        mcd_db(r["audio"].numpy(), p["audio"].numpy(), rate)
        for r, p in zip(reference["texts"], probe["texts"], strict=True)
    ]
    keys = ("weight_bytes", "step_ms_batch1", "step_ms_batch16", "rss_after_load_bytes", "peak_rss_bytes")
    return {
        **{k: probe[k] for k in keys},
        "dtype": probe["spec"]["dtype"],
        "quant": probe["spec"]["quant"],
        "code_agreement": code_agreement(ref_logits, logits),
        "kl": mean_kl(ref_logits, logits),
        "mcd_db": sum(mcds) / len(mcds),
        "mcd_db_per_text": mcds,
    }


def write_csv(results: dict[str, dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_KEYS)
        for mode, row in results.items():
            writer.writerow([mode] + [row[k] for k in CSV_KEYS[1:]])


def write_plot(results: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    """MCD and KL against batch-1 step time, one labelled point per mode."""
    fig, axes = new_figure(2, (10, 4))
    for ax, key, label in ((axes[0], "mcd_db", "MCD vs fp32 (dB)"), (axes[1], "kl", "mean KL vs fp32 (nats)")):
        for mode, row in results.items():
            ax.scatter(row["step_ms_batch1"], row[key])
            ax.annotate(mode, (row["step_ms_batch1"], row[key]), textcoords="offset points", xytext=(4, 4))
        ax.set_xlabel("batch-1 decode step (ms)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    save_figure(fig, path, title, dpi=100)


def quant_sweep(
    checkpoint: CheckpointOpt = None,
    load_format: LoadFormatOpt = "auto",
    dummy_size: DummySizeOpt = "tiny",
    key_env: KeyEnvOpt = None,
    public_key: PublicKeyOpt = None,
    modes: Annotated[str, typer.Option("--modes", help="Comma list of fp32, bf16, fp16, int8.")] = "fp32,bf16,int8",
    texts: Annotated[Path | None, typer.Option("--texts", help="UTF-8 file, one sentence a line.")] = None,
    num_frames: Annotated[int, typer.Option("--num-frames", min=2, help="Code frames per text.")] = 64,
    json_path: Annotated[Path, typer.Option("--json", help="Report file.")] = Path("quant-sweep.json"),
    csv_path: Annotated[Path | None, typer.Option("--csv", help="One row per mode.")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="PNG: quality against speed.")] = None,
) -> None:
    """Measure each precision mode against fp32: code agreement, KL, MCD, weight bytes, RSS, step time."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from turbotts.quality.probe import ProbeSpec

    if plot_path is not None:
        require("matplotlib", purpose="--plot")
    names = parse_modes(modes)
    sentences = list(DEFAULT_TEXTS)
    if texts is not None:
        if not texts.is_file():
            raise typer.BadParameter(f"--texts {texts} does not exist")
        sentences = [line.strip() for line in texts.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not sentences:
            raise typer.BadParameter(f"--texts {texts} holds no sentence")
    source = model_source(checkpoint, load_format, dummy_size, key_env, public_key)  # validates
    if source.is_dummy:
        typer.secho(
            "warning: dummy (random) weights: these quality figures say nothing about real audio quality",
            err=True,
            fg=typer.colors.YELLOW,
        )
    probes: dict[str, dict[str, Any]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="quant-sweep-") as tmp,
        Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar,
    ):
        task = bar.add_task("modes", total=len(names))
        for name in names:
            bar.update(task, description=f"mode {name}")
            dtype, quant = MODES[name]
            spec = ProbeSpec(
                checkpoint=str(checkpoint) if checkpoint else None,
                load_format=load_format,
                dummy_size=dummy_size,
                dtype=dtype,
                quant=quant,
                texts=sentences,
                num_frames=num_frames,
                key_env=key_env,
                public_key=str(public_key) if public_key else None,
                codes_path=None if name == REFERENCE else str(Path(tmp) / f"{REFERENCE}.pt"),
            )
            probes[name] = run_probe_process(spec, Path(tmp), name)
            bar.advance(task)
    results = {name: compare(probes[REFERENCE], probe) for name, probe in probes.items()}
    report = {
        "modes": results,
        "reference": REFERENCE,
        "is_dummy": probes[REFERENCE]["is_dummy"],
        "fingerprint": probes[REFERENCE]["fingerprint"],
        "texts": sentences,
        "num_frames": num_frames,
        "config": {
            "checkpoint": str(checkpoint) if checkpoint else None,
            "load_format": load_format,
            "dummy_size": dummy_size,
        },
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2, default=_json_default))
    if csv_path is not None:
        write_csv(results, csv_path)
    if plot_path is not None:
        write_plot(results, plot_path, f"quant sweep ({'dummy ' + dummy_size if source.is_dummy else 'checkpoint'})")
    _print_table(results)


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _print_table(results: dict[str, dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="quant sweep (vs fp32)")
    for column in ("mode", "weight MB", "b1 ms", "b16 ms", "agree", "KL", "MCD dB", "RSS MB"):
        table.add_column(column)
    for mode, r in results.items():
        table.add_row(
            mode,
            f"{r['weight_bytes'] / 1e6:.1f}",
            f"{r['step_ms_batch1']:.2f}",
            f"{r['step_ms_batch16']:.2f}",
            f"{r['code_agreement']:.4f}",
            f"{r['kl']:.2e}",
            f"{r['mcd_db']:.3f}",
            f"{r['rss_after_load_bytes'] / 1e6:.0f}",
        )
    Console(stderr=True).print(table)
