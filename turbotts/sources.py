"""Where a model's weights come from, and the one function that opens them.

A :class:`ModelSource` is what the user asked for (flags, settings, the Python
API): a directory, the official release, dummy weights, or a sealed directory
with its key and the signer's public key. :func:`open_files` turns it into
:class:`~turbotts.model.files.CheckpointFiles`, verifying signatures and
decrypting in memory on the way; the model layer then only reads files. This is
the module that may know both the model and the guards.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from turbotts.errors import CheckpointError

if TYPE_CHECKING:  # the model's modules import torch: a command that only reads settings never needs them
    from turbotts.fidelity.gate import GatedPrecision
    from turbotts.fidelity.thresholds import GateThresholds
    from turbotts.model.chattts import ChatTTSModel
    from turbotts.model.files import CheckpointFiles, DirectoryFiles, MemoryFiles
    from turbotts.model.speaker import SpeakerStats

logger = logging.getLogger(__name__)

LOAD_FORMATS = ("auto", "dummy")
DUMMY_SIZES = ("tiny", "full")


@dataclass(frozen=True)
class ModelSource:
    """Where weights come from: a directory, the official release, or random (dummy)."""

    checkpoint: Path | None = None
    load_format: str = "auto"
    dummy_size: str = "tiny"
    dummy_seed: int = 0
    sealed_key_env: str | None = None  # environment variable holding the AES key of a sealed checkpoint
    public_key: Path | None = None  # Ed25519 key that must have signed the checkpoint's manifest

    def __post_init__(self) -> None:
        if self.load_format not in LOAD_FORMATS:
            raise CheckpointError(f"--load-format must be one of {', '.join(LOAD_FORMATS)}, not {self.load_format!r}")
        if self.load_format == "dummy" and self.dummy_size not in DUMMY_SIZES:
            raise CheckpointError(f"--dummy-size must be one of {', '.join(DUMMY_SIZES)}, not {self.dummy_size!r}")
        if self.load_format == "dummy" and self.checkpoint is not None:
            raise CheckpointError("pass either --checkpoint or --load-format dummy, not both")
        if self.sealed_key_env is not None and (self.checkpoint is None or self.public_key is None):
            raise CheckpointError("a sealed checkpoint needs --checkpoint DIR and --public-key PEM besides --key-env")

    @property
    def is_dummy(self) -> bool:
        return self.load_format == "dummy"


def _sealed_files(source: ModelSource) -> MemoryFiles:
    from turbotts.guard.keys import load_public_key, secret_key_from_env
    from turbotts.guard.sealed_dir import open_sealed_directory, sealed_fingerprint
    from turbotts.model.files import MemoryFiles

    assert source.checkpoint is not None and source.sealed_key_env is not None and source.public_key is not None
    directory = Path(source.checkpoint)
    key = secret_key_from_env(source.sealed_key_env)
    files = open_sealed_directory(directory, key, load_public_key(source.public_key))
    return MemoryFiles(files, origin=f"sealed:{directory}", fingerprint_hex=sealed_fingerprint(directory))


def _directory_files(source: ModelSource, *, verify: bool) -> DirectoryFiles:
    from turbotts.guard.sealed_dir import is_sealed_directory
    from turbotts.model import checkpoint as ckpt
    from turbotts.model.files import DirectoryFiles

    assert source.checkpoint is not None
    if is_sealed_directory(Path(source.checkpoint)):
        raise CheckpointError(
            f"{source.checkpoint} is a sealed checkpoint: pass --key-env VAR (the environment variable holding its "
            "AES key) and --public-key PEM (the signer's public key), or set TURBOTTS_KEY_ENV and TURBOTTS_PUBLIC_KEY"
        )
    checkpoint = ckpt.open_checkpoint(source.checkpoint, verify=verify)
    if source.public_key is not None:
        from turbotts.guard.keys import load_public_key
        from turbotts.guard.sealed_dir import verify_plain_manifest

        if not verify_plain_manifest(checkpoint.root, load_public_key(source.public_key)):
            raise CheckpointError(
                f"{checkpoint.root} has no signed manifest.json but --public-key was given; sign it first"
            )
    return DirectoryFiles(checkpoint)


def open_files(source: ModelSource, *, verify: bool = True) -> CheckpointFiles:
    """The files ``source`` names, checked and (when sealed) decrypted in memory.

    Raises:
        CheckpointError: missing, tampered or unsigned files, a wrong key, or a sealed
            directory without its key (the message names the flags).
        DownloadError: no checkpoint given and the hub is unreachable.
    """
    from turbotts.model.files import DirectoryFiles

    if source.is_dummy:
        from turbotts.model.dummy import DummyFiles

        return DummyFiles(source.dummy_size, source.dummy_seed)
    if source.sealed_key_env is not None:
        return _sealed_files(source)
    if source.checkpoint is not None:
        return _directory_files(source, verify=verify)
    from turbotts.model.download import download_official

    return DirectoryFiles(download_official())


def load_model(source: ModelSource, *, device: str = "cpu", dtype: str = "fp32", quant: str = "none") -> ChatTTSModel:
    """Load everything a synthesis needs (see :func:`open_files` and :func:`build_model` for errors).

    ``dtype`` and ``quant`` may be ``auto``: see :func:`load_model_gated`.
    """
    return load_model_gated(source, device=device, dtype=dtype, quant=quant)[0]


def load_model_gated(
    source: ModelSource, *, device: str = "cpu", dtype: str = "fp32", quant: str = "none",
    vocoder_dtype: str = "fp32", thresholds: GateThresholds | None = None,
) -> tuple[ChatTTSModel, GatedPrecision]:  # fmt: skip
    """Load, resolving ``auto`` modes: on CPU the speed probe proposes faster modes and the quality
    gate (:mod:`turbotts.fidelity.gate`) adopts those that match fp32 on these weights; on a GPU,
    ``auto`` is bf16 (fp16 without it). The choice and its reasons are logged.
    """
    from turbotts.cpu.precision import resolve_precision
    from turbotts.cpu.quant import speedup_for
    from turbotts.fidelity.gate import GatedPrecision, gate_precision
    from turbotts.fidelity.thresholds import GateThresholds
    from turbotts.model.loader import build_model

    files = open_files(source)
    if "auto" not in (dtype, quant, vocoder_dtype) or not device.startswith("cpu"):
        precision = resolve_precision(dtype, quant, vocoder_dtype, device)
        model = build_model(files, device=device, dtype=precision.dtype, speedup=speedup_for(precision.quant))
        return model, GatedPrecision(precision, (), 0.0)
    explicit_speedup = None if quant == "auto" else speedup_for(quant)
    model = build_model(files, device=device, dtype="fp32" if dtype == "auto" else dtype, speedup=explicit_speedup)
    model, gated = gate_precision(model, dtype, quant, vocoder_dtype, thresholds or GateThresholds())
    chosen = gated.precision
    logger.info("precision %s/%s, vocoder %s on %s (%.1f s to choose): %s", chosen.dtype, chosen.quant,
                chosen.vocoder_dtype, chosen.isa, gated.seconds, "; ".join(chosen.reasons))  # fmt: skip
    return model, gated


def speaker_stats_for(source: ModelSource) -> SpeakerStats:
    """The speaker statistics of a source without loading its weights (no download for the official ones)."""
    from turbotts.model.loader import model_config_of, speaker_stats_of
    from turbotts.model.speaker import SpeakerStats

    if source.checkpoint is None and not source.is_dummy:
        return SpeakerStats.official()
    return speaker_stats_of(model_config_of(open_files(source, verify=False)))
