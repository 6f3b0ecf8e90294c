"""``turbotts watermark detect FILE``: read an audio file and report its mark.

Kept apart from ``watermark.py`` because it does file I/O and printing, which the
embedding path in the server never needs.
"""

from __future__ import annotations

from turbotts.audio import read_audio
from turbotts.errors import AudioReadError
from turbotts.guard.watermark import WatermarkConfig, detect

EXIT_FOUND = 0
EXIT_NOT_FOUND = 1
EXIT_UNREADABLE = 2


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
