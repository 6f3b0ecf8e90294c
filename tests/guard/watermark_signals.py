"""Speech-like test audio for the watermark tests (the dummy model makes noise, not speech).

Syllables of voiced vowels (a glottal harmonic series under three formants, with
a wandering pitch and a rise-and-fall envelope), fricative noise between some of
them and short pauses: the properties that matter for a mark (a colored,
non-stationary host with silences), cheaply and deterministically.
"""

from __future__ import annotations

import numpy as np

SAMPLE_RATE_HZ = 24_000
# (F1, F2, F3) in Hz for /a/, /i/, /u/, /e/, /o/
_VOWELS = ((730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480), (570, 840, 2410))


def _formant_gain(freqs: np.ndarray, formants: tuple[int, int, int]) -> np.ndarray:
    gain = np.zeros_like(freqs)
    for formant, width in zip(formants, (80.0, 100.0, 140.0), strict=True):
        gain += 1.0 / (1.0 + ((freqs - formant) / width) ** 2)
    return gain * (100.0 / np.maximum(freqs, 100.0))  # -6 dB/octave tilt (glottal source and lips)


def speech_like(duration_s: float, seed: int = 0, level: float = 0.3) -> np.ndarray:
    """Mono float32 at 24 kHz, peak around ``level``."""
    rng = np.random.default_rng(seed)
    num_samples = int(duration_s * SAMPLE_RATE_HZ)
    out = np.zeros(num_samples)
    position = int(0.05 * SAMPLE_RATE_HZ)
    while position < num_samples:
        length = int(rng.uniform(0.15, 0.3) * SAMPLE_RATE_HZ)
        t = np.arange(length) / SAMPLE_RATE_HZ
        f0 = rng.uniform(95, 210) * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(2, 5) * t) - 0.1 * t)
        phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE_HZ
        formants = _VOWELS[int(rng.integers(len(_VOWELS)))]
        syllable = np.zeros(length)
        for harmonic in range(1, int(11_000 / f0.max())):
            syllable += _formant_gain(harmonic * f0, formants) * np.sin(harmonic * phase)
        syllable *= np.sin(np.pi * np.arange(length) / length) ** 0.7
        end = min(num_samples, position + length)
        out[position:end] += syllable[: end - position] / np.max(np.abs(syllable))
        position = end
        if rng.random() < 0.4 and position < num_samples:  # a fricative: high-passed noise
            hiss_len = min(num_samples - position, int(rng.uniform(0.05, 0.12) * SAMPLE_RATE_HZ))
            hiss = np.diff(rng.normal(size=hiss_len + 1)) * 0.15 * np.hanning(hiss_len)
            out[position : position + hiss_len] += hiss
            position += hiss_len
        position += int(rng.uniform(0.0, 0.12) * SAMPLE_RATE_HZ)  # pause
    return (level * out / max(np.max(np.abs(out)), 1e-9)).astype(np.float32)
