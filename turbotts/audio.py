"""Audio utilities shared by every layer: read a file as mono float32, resample with soxr.

Why one module: the watermark detector, the fallback clip and voice cloning all
read user audio and bring it to the model's 24 kHz; they should read the same
formats and resample the same way (soxr, not a hand-written filter).

Reference clips (zero-shot voices) are checked here too, so the server's upload,
the CLI and the Python API refuse the same clips with the same message. Why the
bounds: under a second there is too little voice to continue (and the official
encoder fails below 513 samples, case j7); the clip's codes are part of every
prompt that uses the voice (about 47 positions per second), so a long clip costs
KV space and prefill time on every request. The DVAE encoding itself is
:func:`turbotts.model.reference.encode_reference`.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from turbotts.errors import AudioReadError, InvalidInputError, ReferenceAudioError, ReferenceTooLargeError

_SOUNDFILE_SUFFIXES = {".wav", ".flac", ".ogg_vorbis", ".aiff", ".aif"}


def resample(wav: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    """``wav`` (mono) at ``to_hz``, band-limited by soxr's high-quality filter; float32."""
    if from_hz == to_hz:
        return np.asarray(wav, dtype=np.float32)
    import soxr

    return np.asarray(soxr.resample(np.asarray(wav, dtype=np.float32), from_hz, to_hz, quality="HQ"), np.float32)


def _read_with_soundfile(path: Path) -> tuple[np.ndarray, int]:
    import soundfile as sf

    try:
        data, sample_rate_hz = sf.read(str(path), dtype="float32", always_2d=True)
    except (RuntimeError, OSError, ValueError) as exc:  # soundfile.LibsndfileError is a RuntimeError
        raise AudioReadError(str(exc)) from exc
    return data.mean(axis=1), int(sample_rate_hz)


def _read_with_av(source: str | io.BytesIO) -> tuple[np.ndarray, int]:
    """FFmpeg's decoders (mp3, opus, m4a/AAC, ...) on a path or an in-memory file; channels mixed to mono."""
    import av

    chunks: list[np.ndarray] = []
    sample_rate_hz = 0
    try:
        with av.open(source, mode="r") as container:
            if not container.streams.audio:
                raise AudioReadError("the file has no audio stream")
            resampler = av.AudioResampler(format="flt", layout="mono")
            for frame in container.decode(audio=0):
                sample_rate_hz = frame.sample_rate
                for converted in resampler.resample(frame):
                    chunks.append(converted.to_ndarray().reshape(-1))
    except (av.error.FFmpegError, ValueError) as exc:
        raise AudioReadError(f"not a decodable audio file ({exc})") from exc
    if not chunks:
        raise AudioReadError("the file holds no audio samples")
    return np.concatenate(chunks), sample_rate_hz


def read_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """Mono float32 samples and their rate: soundfile for WAV/FLAC, PyAV for mp3/opus/aac and the rest.

    Raises:
        AudioReadError: the file is missing or not decodable audio.
    """
    file = Path(path)
    if not file.is_file():
        raise AudioReadError(f"{file} does not exist")
    if file.suffix.lower() in _SOUNDFILE_SUFFIXES:
        return _read_with_soundfile(file)
    return _read_with_av(str(file))


def read_audio_bytes(data: bytes) -> tuple[np.ndarray, int]:
    """Mono float32 samples and their rate of an in-memory file (an upload), any container.

    libsndfile first (WAV, FLAC, Ogg Vorbis/Opus, MP3 where it was built with them), then
    PyAV (FFmpeg's decoders: m4a/AAC and anything libsndfile refuses). Channels are averaged.

    Raises:
        AudioReadError: neither can decode the bytes.
    """
    import soundfile as sf

    try:
        samples, sample_rate_hz = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
        return samples.mean(axis=1), int(sample_rate_hz)
    except (RuntimeError, OSError, ValueError, TypeError):  # soundfile.LibsndfileError is a RuntimeError
        pass
    return _read_with_av(io.BytesIO(data))


def read_mono(path: str | Path, sample_rate_hz: int) -> np.ndarray:
    """A file as mono float32 at ``sample_rate_hz`` (read, then resampled).

    Raises:
        AudioReadError: the file is missing or not decodable audio.
    """
    samples, rate = read_audio(path)
    return resample(samples, rate, sample_rate_hz)


#: Peak below which a clip counts as silent (about -80 dBFS).
SILENCE_PEAK = 1e-4


@dataclass(frozen=True)
class ReferenceLimits:
    """What a reference clip may be: duration in seconds and upload size in bytes."""

    min_s: float = 1.0
    max_s: float = 30.0
    max_bytes: int = 10 * 2**20

    def __post_init__(self) -> None:
        if not 0 < self.min_s < self.max_s:
            raise InvalidInputError(f"reference clip bounds must satisfy 0 < min ({self.min_s}) < max ({self.max_s})")
        if self.max_bytes < 1:
            raise InvalidInputError("max_bytes of a reference clip must be at least 1")


def clip_digest(data: bytes) -> str:
    """SHA-256 of an uploaded clip: what logs name it by (never the bytes)."""
    return hashlib.sha256(data).hexdigest()


def load_reference_clip(data: bytes, sample_rate_hz: int, limits: ReferenceLimits) -> np.ndarray:
    """Decode, downmix to mono and resample (soxr) a clip; check its size and duration.

    Args:
        data: the file's bytes (wav, flac, mp3, ogg/opus, m4a, ...).
        sample_rate_hz: the model's rate (24 kHz).
        limits: the bounds to enforce.

    Returns:
        float32 mono samples at ``sample_rate_hz``.

    Raises:
        ReferenceTooLargeError: more than ``limits.max_bytes`` bytes.
        ReferenceAudioError: empty, undecodable, silent, or outside the duration bounds.
    """
    if not data:
        raise ReferenceAudioError("the reference clip is empty; upload an audio file (wav, flac, mp3, ogg, m4a)")
    if len(data) > limits.max_bytes:
        raise ReferenceTooLargeError(
            f"the reference clip is {len(data)} bytes; at most {limits.max_bytes} are accepted. "
            "Upload a shorter clip or a compressed format (flac, mp3)"
        )
    try:
        samples, rate = read_audio_bytes(data)
    except AudioReadError as exc:
        raise ReferenceAudioError(f"the reference clip cannot be decoded as audio ({exc})") from exc
    if rate <= 0 or samples.size == 0:
        raise ReferenceAudioError("the reference clip holds no audio samples")
    duration_s = samples.size / rate
    if not limits.min_s <= duration_s <= limits.max_s:
        raise ReferenceAudioError(
            f"the reference clip is {duration_s:.2f} s long; it must last between {limits.min_s:g} and "
            f"{limits.max_s:g} s. Trim it to a few sentences of clear speech"
        )
    if not np.isfinite(samples).all() or float(np.abs(samples).max()) < SILENCE_PEAK:
        raise ReferenceAudioError("the reference clip is silent (or not finite); upload a clip of speech")
    return resample(samples, rate, sample_rate_hz)
