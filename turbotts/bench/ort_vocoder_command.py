"""``turbotts ort-vocoder``: the command line of :mod:`turbotts.bench.ort_vocoder` (torch loads when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def ort_vocoder(
    out: Annotated[Path, typer.Option("--out", help="Folder for vocoder.onnx, ort_vocoder.json and .png.")],
    dummy_size: Annotated[str, typer.Option("--dummy-size", help="tiny or full (random weights).")] = "full",
    batches: Annotated[str, typer.Option("--batches", help="Batch sizes (comma list).")] = "1,16",
    frames: Annotated[str, typer.Option("--frames", help="Code frames (comma list); default: streaming's.")] = "",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    threads: Annotated[int, typer.Option("--threads", help="Threads of both sides (default: torch's).")] = 0,
) -> None:
    """Export Decoder + Vocos to ONNX and time onnxruntime against torch on the same inputs (JSON + PNG)."""
    from turbotts.optional import require

    require("onnx", "onnxruntime", "onnxscript", "matplotlib", purpose="turbotts ort-vocoder")
    from turbotts.bench.ort_vocoder import run

    run(out, dummy_size, batches, frames, seed, threads)
