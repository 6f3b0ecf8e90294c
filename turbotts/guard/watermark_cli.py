"""``turbotts watermark detect FILE``: read an audio file and report its mark.

Kept apart from ``watermark.py`` because it does file I/O and printing, which the
embedding path in the server never needs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from turbotts.errors import AudioReadError
from turbotts.guard.watermark import WatermarkConfig, detect

EXIT_FOUND = 0
EXIT_NOT_FOUND = 1
EXIT_UNREADABLE = 2
_SOUNDFILE_SUFFIXES = {".wav", ".flac", ".ogg_vorbis", ".aiff", ".aif"}


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


def watermark_detect_command(path: str, key: bytes, config: WatermarkConfig | None = None) -> int:
    """Print the payload found in ``path``; returns 0 found, 1 not found, 2 unreadable."""
    config = config or WatermarkConfig()
    try:
        samples, sample_rate_hz = read_audio(path)
    except AudioReadError as exc:
        print(f"cannot read {path}: {exc}; pass a WAV, FLAC, mp3, opus or aac file")
        return EXIT_UNREADABLE
    duration_s = len(samples) / sample_rate_hz
    payload = detect(samples, sample_rate_hz, key, config)
    if payload is None:
        min_s = config.frame_len / 24_000
        hint = (
            f" (it lasts {duration_s:.2f} s; at least {min_s:.0f} s, ideally 2 s, are needed)" if duration_s < 2 else ""
        )
        print(f"no watermark found in {path} with this key{hint}")
        return EXIT_NOT_FOUND
    print(f"watermark found in {path}")
    print(f"  key id:       {payload.key_id}")
    print(f"  timestamp:    {payload.timestamp.isoformat()}")
    print(f"  request hash: {payload.request_hash:04x} (first 16 bits of the request's SHA-256)")
    return EXIT_FOUND
