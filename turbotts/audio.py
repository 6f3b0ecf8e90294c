"""Audio utilities shared by every layer: read a file as mono float32, resample with soxr.

Why one module: the watermark detector, the fallback clip and voice cloning all
read user audio and bring it to the model's 24 kHz; they should read the same
formats and resample the same way (soxr, not a hand-written filter).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from turbotts.errors import AudioReadError

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


def _read_with_av(path: Path) -> tuple[np.ndarray, int]:
    import av

    chunks: list[np.ndarray] = []
    sample_rate_hz = 0
    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                raise AudioReadError("the file has no audio stream")
            resampler = av.AudioResampler(format="flt", layout="mono")
            for frame in container.decode(audio=0):
                sample_rate_hz = frame.sample_rate
                for converted in resampler.resample(frame):
                    chunks.append(converted.to_ndarray().reshape(-1))
    except av.error.FFmpegError as exc:
        raise AudioReadError(str(exc)) from exc
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
    return _read_with_av(file)


def read_mono(path: str | Path, sample_rate_hz: int) -> np.ndarray:
    """A file as mono float32 at ``sample_rate_hz`` (read, then resampled).

    Raises:
        AudioReadError: the file is missing or not decodable audio.
    """
    samples, rate = read_audio(path)
    return resample(samples, rate, sample_rate_hz)
