"""``turbotts quality check``: has the audio of a fixed synthesis moved from a stored baseline?

The check synthesizes a fixed set of sentences with greedy decoding, a fixed
voice seed and refine off, so the same model and code give the same audio. It
computes each sentence's MCD against the baseline's stored mel cepstra (the
baseline's own MCD is 0 dB) and fails (exit 1) when the mean MCD exceeds
``--threshold-db``. It is a regression check at fixed settings: a greedy run
of another precision may take a different code path early and then diverge as a
whole, so compare precisions with ``turbotts quant-sweep`` instead.

Exit codes: 0 pass, 1 MCD above threshold, 2 bad input (no baseline file, a
baseline for other sentences).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from turbotts.cli_options import (
    USAGE_ERROR,
    CheckpointOpt,
    DeviceOpt,
    DtypeOpt,
    DummySizeOpt,
    KeyEnvOpt,
    LoadFormatOpt,
    PublicKeyOpt,
    QuantOpt,
    model_source,
)
from turbotts.errors import InvalidInputError
from turbotts.quality.baseline import (
    SAMPLING_SEED,
    SENTENCES,
    VOICE_SEED,
    Baseline,
    fixed_params,
    load_baseline,
    write_baseline,
)

quality_app = typer.Typer(no_args_is_help=True, help="Audio quality checks.")
FAILED = 1


def synthesize_fixed(model: Any, max_new_tokens: int) -> list[np.ndarray]:
    """The check's deterministic synthesis (:func:`fixed_params`) of the fixed sentences."""
    from turbotts.api import TTS

    return TTS(model).synthesize(list(SENTENCES), fixed_params(max_new_tokens))


def read_baseline(path: Path) -> Baseline:
    """The baseline at ``path``.

    Raises:
        typer.Exit: (code 2) the file is missing, not a baseline, or made for other sentences.
    """
    try:
        return load_baseline(path)
    except InvalidInputError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(USAGE_ERROR) from exc


@quality_app.command("check")
def quality_check(
    baseline: Annotated[Path, typer.Option("--baseline", help="Baseline .npz (mel cepstra + metadata).")],
    write: Annotated[bool, typer.Option("--write-baseline", help="Create or replace the baseline.")] = False,
    checkpoint: CheckpointOpt = None,
    load_format: LoadFormatOpt = "auto",
    dummy_size: DummySizeOpt = "tiny",
    key_env: KeyEnvOpt = None,
    public_key: PublicKeyOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "fp32",
    quant: QuantOpt = "none",
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=1)] = 256,
    threshold_db: Annotated[float, typer.Option("--threshold-db", help="Largest mean MCD that passes.")] = 0.2,
) -> None:
    """Synthesize fixed sentences and fail (exit 1) if their mean MCD to the baseline exceeds the threshold."""
    from turbotts.fidelity.mcd import mcd_from_cepstra, mel_cepstrum
    from turbotts.sources import load_model

    stored = None if write else read_baseline(baseline)  # fail on a bad baseline before loading weights
    source = model_source(checkpoint, load_format, dummy_size, key_env, public_key)
    model = load_model(source, device=device, dtype=dtype, quant=quant)
    cepstra = [mel_cepstrum(wav, model.sample_rate_hz) for wav in synthesize_fixed(model, max_new_tokens)]
    settings = {"dtype": dtype, "quant": quant, "device": device, "max_new_tokens": max_new_tokens}
    if stored is None:
        metadata = {
            "fingerprint": model.fingerprint,
            "is_dummy": model.is_dummy,
            "sentences": list(SENTENCES),
            "voice_seed": VOICE_SEED,
            "seed": SAMPLING_SEED,
            "greedy": True,
            "refine_text": False,
            "sample_rate_hz": model.sample_rate_hz,
            "settings": settings,
        }
        write_baseline(baseline, cepstra, metadata)
        typer.echo(f"wrote baseline {baseline} ({len(cepstra)} sentences, model {model.fingerprint})")
        return
    meta = stored.metadata
    if meta.get("fingerprint") != model.fingerprint:
        typer.secho(f"warning: the baseline was made from other weights ({meta.get('fingerprint')})", err=True)
    mcds = [mcd_from_cepstra(ref, new) for ref, new in zip(stored.cepstra, cepstra, strict=True)]
    for sentence, ref, new, value in zip(SENTENCES, stored.cepstra, cepstra, mcds, strict=True):
        frames = f"{len(new)} frames" + ("" if len(ref) == len(new) else f" (baseline {len(ref)})")
        typer.echo(f"{value:8.3f} dB  {frames}  {sentence}")
    mean = float(np.mean(mcds))
    verdict = "PASS" if mean <= threshold_db else "FAIL"
    typer.echo(f"mean MCD {mean:.3f} dB (threshold {threshold_db} dB, baseline {meta.get('settings')}): {verdict}")
    if verdict == "FAIL":
        raise typer.Exit(FAILED)
