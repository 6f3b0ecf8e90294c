"""Real speech (Debian's espeak-ng) and the server's own codecs, for the watermark tests and
``scripts/watermark_accuracy.py``.

Synthetic vowels (``watermark_signals``) are cheap but kind to the mark; espeak-ng gives
real consonants, formant transitions and pauses. Its 22,050 Hz output is resampled to
the model's 24 kHz with soxr. Encoding goes through :func:`encode_audio`, the code the
server answers with, and decoding through PyAV (libavcodec), as a client's player would.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tempfile
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf

from tests.required_tools import is_required
from turbotts.server.audio.encoding import encode_audio

SAMPLE_RATE_HZ = 24_000
SENTENCE = (
    "The quick brown fox jumps over the lazy dog, while seven wizards quietly mix a potion "
    "of bright green juice beside the old stone bridge."
)
ESPEAK = "espeak-ng"


def espeak_speech(text: str = SENTENCE, voice: str = "en-us") -> np.ndarray:
    """``text`` spoken by espeak-ng: mono float32 at 24 kHz.

    Raises:
        FileNotFoundError: espeak-ng is not on PATH (``apt-get install espeak-ng``).
    """
    import soxr

    if shutil.which(ESPEAK) is None:
        raise FileNotFoundError(f"{ESPEAK} is not on PATH; install it with: apt-get install -y espeak-ng")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "speech.wav"
        subprocess.run([ESPEAK, "-v", voice, "-w", str(path), text], check=True, capture_output=True, timeout=60)
        samples, rate_hz = sf.read(path, dtype="float32", always_2d=True)
    speech = np.asarray(soxr.resample(samples.mean(axis=1), rate_hz, SAMPLE_RATE_HZ, quality="HQ"), dtype=np.float32)
    return _trim_silence(speech)


def _trim_silence(wav: np.ndarray, margin_s: float = 0.02) -> np.ndarray:
    """Drop espeak-ng's leading and trailing silence (10 ms blocks 50 dB below the peak), so that every
    excerpt is speech: the mark follows the speech level, and silence carries none of it."""
    block = SAMPLE_RATE_HZ // 100
    num_blocks = len(wav) // block
    rms = np.sqrt(np.mean(wav[: num_blocks * block].reshape(num_blocks, block) ** 2, axis=1))
    voiced = np.flatnonzero(rms > np.max(np.abs(wav)) * 10 ** (-50 / 20))
    if voiced.size == 0:
        return wav
    margin = round(margin_s * SAMPLE_RATE_HZ)
    return wav[max(0, voiced[0] * block - margin) : min(len(wav), (voiced[-1] + 1) * block + margin)]


def espeak_or_skip(text: str = SENTENCE) -> np.ndarray:
    """:func:`espeak_speech`, or skip the test; fails instead where espeak-ng is required."""
    try:
        return espeak_speech(text)
    except FileNotFoundError as exc:
        if is_required("ESPEAK"):
            pytest.fail(f"{exc} (required because CI or TURBOTTS_REQUIRE_ESPEAK=1 is set)", pytrace=False)
        pytest.skip(str(exc))


def decode_av(data: bytes) -> tuple[np.ndarray, int]:
    """Mono float32 samples and their rate, decoded by libavcodec."""
    to_float = av.AudioResampler(format="flt", layout="mono")
    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.audio[0]
        chunks = [c.to_ndarray().reshape(-1) for f in container.decode(stream) for c in to_float.resample(f)]
        rate_hz = int(stream.codec_context.sample_rate)
    return np.concatenate(chunks), rate_hz


def server_round_trip(wav: np.ndarray, fmt: str, bit_rate_kbps: int | None = None) -> tuple[np.ndarray, int]:
    """Encode with the server's encoder, then decode (PyAV for the lossy formats, libsndfile for wav/flac)."""
    data = encode_audio(wav, fmt, SAMPLE_RATE_HZ, bit_rate_kbps=bit_rate_kbps)
    if fmt in ("wav", "flac"):
        samples, rate_hz = sf.read(io.BytesIO(data), dtype="float32")
        return np.asarray(samples, dtype=np.float32), int(rate_hz)
    return decode_av(data)
