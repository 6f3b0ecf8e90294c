"""Four independent readers of what the server sends: PyAV, libsndfile, Debian's ffmpeg/ffprobe, Chromium.

Each reader answers ``(sample_rate_hz, num_samples)`` for one response body, so a
test can compare decoded durations with what was synthesized. Chromium decodes
with the Web Audio API (``OfflineAudioContext.decodeAudioData``) in Debian's
``/usr/bin/chromium`` driven by playwright (never ``playwright install``).
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import av
import soundfile as sf

from tests.browser import chromium_browser

PCM_RATE_HZ = 24000
#: Samples a decoder may add beyond the synthesized audio, at the format's own rate:
#: (codec priming it may keep, one frame of end padding). A streamed mp3 has no LAME
#: tag and raw ADTS no edit list, so decoders keep the encoder delay (LAME 576 + 529,
#: AAC 1024); ffprobe counts Ogg Opus's 312-sample pre-skip in its duration.
DECODER_SLACK = {
    "mp3": (1105, 576),
    "aac": (1024, 1024),
    "opus": (312, 960),
    "flac": (0, 0),
    "wav": (0, 0),
    "pcm": (0, 0),
}
_RAW_PCM = {"format": "RAW", "subtype": "PCM_16", "samplerate": PCM_RATE_HZ, "channels": 1}
_FFMPEG_RAW_INPUT = ["-f", "s16le", "-ar", str(PCM_RATE_HZ), "-ac", "1"]


def read_pyav(data: bytes, fmt: str) -> tuple[int, int]:
    options = {"sample_rate": str(PCM_RATE_HZ), "ch_layout": "mono"} if fmt == "pcm" else {}
    with av.open(io.BytesIO(data), mode="r", format="s16le" if fmt == "pcm" else None, options=options) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.channels == 1
        num_samples = sum(int(frame.samples) for frame in container.decode(stream))
        return int(stream.codec_context.sample_rate), num_samples


def read_soundfile(data: bytes, fmt: str) -> tuple[int, int]:
    """libsndfile reads the whole body at once, as ``soundfile.read(io.BytesIO(body))`` users do."""
    samples, rate = sf.read(io.BytesIO(data), dtype="float32", **(_RAW_PCM if fmt == "pcm" else {}))
    assert samples.ndim == 1, "mono"
    return int(rate), int(samples.shape[0])


def read_ffmpeg(data: bytes, fmt: str) -> tuple[int, int]:
    """Decode with the ``ffmpeg`` command from a pipe (no seeking, like a client reading a socket)."""
    raw_input = _FFMPEG_RAW_INPUT if fmt == "pcm" else []
    rate = int(_ffprobe(data, fmt)["streams"][0]["sample_rate"])
    decoded = subprocess.run(
        ["ffmpeg", "-nostdin", "-v", "error", *raw_input, "-i", "pipe:0", "-f", "s16le", "-ac", "1", "pipe:1"],
        input=data, capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    assert decoded.stderr == b"", decoded.stderr.decode(errors="replace")
    return rate, len(decoded.stdout) // 2


def read_ffprobe(data: bytes, fmt: str) -> tuple[int, int]:
    """ffprobe's own duration (from the header, or estimated from the file size) in samples."""
    probed = _ffprobe(data, fmt)
    stream = probed["streams"][0]
    assert int(stream["channels"]) == 1
    rate = int(stream["sample_rate"])
    return rate, round(float(probed["format"]["duration"]) * rate)


def _ffprobe(data: bytes, fmt: str) -> dict[str, Any]:
    raw_input = _FFMPEG_RAW_INPUT if fmt == "pcm" else []
    with tempfile.NamedTemporaryFile(suffix=f".{fmt}") as file:  # a file: ffprobe may seek to estimate
        file.write(data)
        file.flush()
        probed = subprocess.run(
            ["ffprobe", "-v", "error", *raw_input, "-show_entries",
             "stream=codec_name,sample_rate,channels:format=duration", "-of", "json", file.name],
            capture_output=True, check=True, timeout=60,
        )  # fmt: skip
    assert probed.stderr == b"", probed.stderr.decode(errors="replace")
    result: dict[str, Any] = json.loads(probed.stdout)
    return result


_DECODE_JS = """async ([b64, rateHz]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const context = new OfflineAudioContext(1, 1, rateHz);
  try {
    const buffer = await context.decodeAudioData(bytes.buffer);
    return {length: buffer.length, rate: buffer.sampleRate, channels: buffer.numberOfChannels};
  } catch (error) {
    return {error: String(error)};
  }
}"""


class ChromiumReader:
    """``decodeAudioData`` in one headless Chromium page; the context runs at the format's own rate."""

    def __init__(self, page: Any) -> None:
        self._page = page

    def read(self, data: bytes, rate_hz: int) -> tuple[int, int]:
        result = self._page.evaluate(_DECODE_JS, [base64.b64encode(data).decode("ascii"), rate_hz])
        assert "error" not in result, f"Chromium could not decode it: {result['error']}"
        assert result["channels"] == 1
        return int(result["rate"]), int(result["length"])


@contextmanager
def chromium_reader() -> Iterator[ChromiumReader]:
    """``decodeAudioData`` in Debian's Chromium (:func:`tests.browser.chromium_browser`: skipped or failed
    when it is missing)."""
    with chromium_browser() as browser:
        page = browser.new_page()
        page.set_content("<!doctype html><title>decode</title>")
        yield ChromiumReader(page)
