"""Command-line options shared by every command that loads a model (one
definition, so their names and help never drift apart between commands)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from turbotts.sources import ModelSource

USAGE_ERROR = 2  # the exit code of every user mistake


def fail(message: str) -> typer.Exit:
    """Print ``error: MESSAGE`` in red on stderr; raise the result to exit with code 2."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(USAGE_ERROR)


CheckpointOpt = Annotated[
    Path | None,
    typer.Option("--checkpoint", help="Checkpoint directory in the 2Noise/ChatTTS layout (holds asset/)."),
]
LoadFormatOpt = Annotated[
    str, typer.Option("--load-format", help="auto: --checkpoint or the official weights; dummy: random weights.")
]
DummySizeOpt = Annotated[str, typer.Option("--dummy-size", help="Size of dummy weights: tiny or full.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N.")]
DtypeOpt = Annotated[
    str,
    typer.Option(
        "--dtype", help="GPT precision: auto (the fastest mode that passes the quality gate), fp32, bf16 or fp16."
    ),
]
QuantOpt = Annotated[
    str,
    typer.Option(
        "--quant",
        help="GPT weight quantization: auto (int8 where faster and it passes the quality "
        "gate against fp32), none (bit-exact) or int8.",
    ),
]
KeyEnvOpt = Annotated[
    str | None,
    typer.Option(
        "--key-env",
        envvar="TURBOTTS_KEY_ENV",
        help="Sealed checkpoint: name of the environment variable holding its AES key (the key never goes on a flag).",
    ),
]
PublicKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--public-key",
        envvar="TURBOTTS_PUBLIC_KEY",
        help="Ed25519 public key (PEM) that signed the checkpoint: required for a sealed one, verifies a plain one.",
    ),
]


def model_source(
    checkpoint: Path | None,
    load_format: str,
    dummy_size: str,
    key_env: str | None = None,
    public_key: Path | None = None,
) -> ModelSource:
    """The one place command-line flags become a :class:`ModelSource` (validated there)."""
    from turbotts.sources import ModelSource

    return ModelSource(
        checkpoint=checkpoint,
        load_format=load_format,
        dummy_size=dummy_size,
        sealed_key_env=key_env,
        public_key=public_key,
    )
