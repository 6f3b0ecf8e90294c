"""Quality measurement: how far a precision mode or a code change moves the output.

* :mod:`turbotts.quality.mcd` mel-cepstral distortion between two waveforms;
* :mod:`turbotts.quality.metrics` code agreement and KL between code distributions;
* :mod:`turbotts.quality.probe` one precision mode measured in its own process;
* :mod:`turbotts.quality.sweep` ``turbotts quant-sweep``;
* :mod:`turbotts.quality.check` ``turbotts quality check`` against a stored baseline.
"""

from __future__ import annotations

from turbotts.quality.mcd import mcd_db, mel_cepstrum
from turbotts.quality.metrics import code_agreement, mean_kl

__all__ = ["code_agreement", "mcd_db", "mean_kl", "mel_cepstrum"]
