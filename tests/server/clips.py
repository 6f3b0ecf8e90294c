"""Reference clips for the voice-cloning tests: real speech (espeak-ng) in the containers users upload."""

from __future__ import annotations

import io
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from tests.guard.watermark_speech import espeak_or_skip

CLIP_TEXT = "The quick brown fox jumps over the lazy dog, while seven wizards quietly mix a potion."
RATE_HZ = 24_000


def speech_24k() -> np.ndarray:
    """About five seconds of espeak-ng speech, mono float32 at 24 kHz."""
    return espeak_or_skip(CLIP_TEXT)


def stereo_16k_wav(speech: np.ndarray) -> bytes:
    """The clip at 16 kHz, two slightly different channels, 16-bit WAV."""
    mono = np.asarray(soxr.resample(speech, RATE_HZ, 16_000, quality="HQ"), dtype=np.float32)
    stereo = np.stack([mono, 0.8 * mono], axis=1)  # (N, 2)
    return wav_bytes(stereo, 16_000)


def wav_bytes(samples: np.ndarray, rate_hz: int, fmt: str = "WAV", subtype: str = "PCM_16") -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate_hz, format=fmt, subtype=subtype)
    return buffer.getvalue()


def ffmpeg_encode(wav: bytes, suffix: str, *codec_args: str) -> bytes:
    """``wav`` re-encoded by Debian's ffmpeg (mp3, ogg/opus, m4a/AAC)."""
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "in.wav", Path(tmp) / f"out{suffix}"
        source.write_bytes(wav)
        subprocess.run(
            ["ffmpeg", "-v", "error", "-y", "-i", str(source), *codec_args, str(target)],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        return target.read_bytes()


def clips_by_format(speech: np.ndarray) -> dict[str, bytes]:
    """The same speech as every upload format the API takes, at various rates and channel counts."""
    stereo = stereo_16k_wav(speech)
    flac_44k = wav_bytes(np.asarray(soxr.resample(speech, RATE_HZ, 44_100), np.float32), 44_100, "FLAC")
    return {
        "wav-16k-stereo": stereo,
        "flac-44k": flac_44k,
        "mp3": ffmpeg_encode(stereo, ".mp3", "-c:a", "libmp3lame", "-b:a", "64k"),
        "ogg-opus": ffmpeg_encode(stereo, ".ogg", "-c:a", "libopus", "-b:a", "48k"),
        "m4a": ffmpeg_encode(stereo, ".m4a", "-c:a", "aac", "-b:a", "64k"),
    }
