"""What a faster precision mode must reach against fp32: plain numbers, so settings can name them without torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GateThresholds:
    """What a faster mode must reach against fp32 (see docs/cpu-performance.md for the reasoning)."""

    #: share of teacher-forced (position, codebook) argmax codes equal to fp32's
    min_code_agreement: float = 0.90
    #: mel-cepstral distortion (dB) of its audio against fp32's, decoded from the same codes
    max_mcd_db: float = 4.0
