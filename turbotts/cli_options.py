"""Command-line options shared by every command that loads a model (one
definition, so their names and help never drift apart between commands)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

CheckpointOpt = Annotated[
    Path | None,
    typer.Option("--checkpoint", help="Checkpoint directory in the 2Noise/ChatTTS layout (holds asset/)."),
]
LoadFormatOpt = Annotated[
    str, typer.Option("--load-format", help="auto: --checkpoint or the official weights; dummy: random weights.")
]
DummySizeOpt = Annotated[str, typer.Option("--dummy-size", help="Size of dummy weights: tiny or full.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="GPT weight precision: fp32, bf16 or fp16.")]
QuantOpt = Annotated[str, typer.Option("--quant", help="GPT weight quantization: none or int8.")]
