"""A quality baseline: the fixed sentences, their deterministic synthesis settings, and their stored mel cepstra.

Shared by ``turbotts quality check`` (one run, exit code) and the server's live
monitor (:mod:`turbotts.server.ops.quality_monitor`, a gauge per sentence), so both
synthesize the same way and score with the same MCD. Nothing here knows about
the command line or the server: a bad file raises :class:`InvalidInputError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from turbotts.errors import InvalidInputError
from turbotts.params import SamplingParams, SynthesisParams

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "今天天气很好，我们一起去公园散步吧。",
    "Please call me back at five thirty tomorrow.",
)
VOICE_SEED = 7
SAMPLING_SEED = 1234
DEFAULT_MAX_NEW_TOKENS = 256


def fixed_params(max_new_tokens: int) -> SynthesisParams:
    """The deterministic synthesis: greedy, fixed voice and seed, no refine (same model and code, same audio)."""
    return SynthesisParams(
        code=SamplingParams(greedy=True, max_new_tokens=max_new_tokens),
        voice_seed=VOICE_SEED,
        seed=SAMPLING_SEED,
        refine_text=False,
    )


@dataclass(frozen=True)
class Baseline:
    """Stored (T, 25) mel cepstra per sentence and the metadata of the run that made them."""

    cepstra: list[np.ndarray]
    metadata: dict[str, Any]

    @property
    def max_new_tokens(self) -> int:
        """The code-frame cap the baseline was made with (a different cap could cut the audio elsewhere)."""
        return int(self.metadata.get("settings", {}).get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))

    def mcd_db(self, audio: list[np.ndarray], sample_rate_hz: int) -> list[float]:
        """MCD (dB) of each sentence's new waveform against its stored cepstrum."""
        from turbotts.fidelity.mcd import mcd_from_cepstra, mel_cepstrum

        return [
            mcd_from_cepstra(ref, mel_cepstrum(wav, sample_rate_hz))
            for ref, wav in zip(self.cepstra, audio, strict=True)
        ]


def write_baseline(path: Path, cepstra: list[np.ndarray], metadata: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {f"cepstra_{i}": c for i, c in enumerate(cepstra)}
    arrays["metadata"] = np.array(json.dumps(metadata))
    with path.open("wb") as f:  # a file object: np.savez would append .npz to a bare name
        np.savez_compressed(f, **arrays)


def load_baseline(path: Path) -> Baseline:
    """The baseline stored at ``path``.

    Raises:
        InvalidInputError: the file is missing, is not a baseline, or was made for other sentences.
    """
    if not path.is_file():
        raise InvalidInputError(f"baseline {path} does not exist; run `turbotts quality check --write-baseline`")
    try:
        with np.load(path) as data:
            metadata = json.loads(str(data["metadata"]))
            cepstra = [data[f"cepstra_{i}"] for i in range(len(metadata["sentences"]))]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInputError(f"{path} is not a quality baseline ({exc}); write it again") from exc
    if tuple(metadata["sentences"]) != SENTENCES:
        raise InvalidInputError(f"{path} was made for other sentences; write it again")
    return Baseline(cepstra, metadata)
