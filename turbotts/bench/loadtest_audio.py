"""What audio a client had, and when: decode a received stream into playable seconds over time.

The load generator records when each piece of the body arrived (cumulative bytes
over wall time). This module turns those bytes into *audio* by decoding them, never
by dividing a byte count by a guessed bit rate:

- ``pcm``: 16-bit mono samples at 24 kHz (OpenAI's pcm), counted;
- ``wav``: the header gives the rate, channels and sample width and where the samples
  start; the samples after it are counted (a streamed header says "length unknown");
- ``mp3``, ``opus``, ``aac``, ``flac``: PyAV demuxes the whole body once, decodes each
  packet and counts its samples; a packet is playable once the bytes up to the next
  packet's (or Ogg page's) start have arrived, so a timeline is never optimistic.

SSE bodies (``stream_format="sse"``) are unwrapped first by :class:`SseAudioParser`:
each ``speech.audio.delta`` event carries base64 bytes of the response format.
"""

from __future__ import annotations

import base64
import bisect
import io
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from turbotts.bench.loadtest_player import AudioArrival
from turbotts.errors import AudioReadError  # the body is not audio of the format asked for

PCM_SAMPLE_RATE_HZ = 24000  # OpenAI's (and TurboTTS's) raw pcm: 24 kHz, 16-bit, mono
_PCM_BYTES_PER_SAMPLE = 2
DECODED_FORMATS = ("mp3", "opus", "aac", "flac")


@dataclass(frozen=True)
class ByteArrival:
    """``num_bytes`` bytes of the audio file, in total, had arrived ``time_s`` after the request was sent."""

    time_s: float
    num_bytes: int


@dataclass(frozen=True)
class DecodedAudio:
    duration_s: float
    arrivals: list[AudioArrival]  # playable audio over time, one entry per byte arrival


def decode_timeline(response_format: str, body: bytes, arrivals: Sequence[ByteArrival]) -> DecodedAudio:
    """Playable seconds of audio at each byte arrival, and the decoded duration.

    Raises:
        AudioReadError: a malformed WAV header, or bytes PyAV cannot decode.
    """
    if response_format == "pcm":
        ends, samples, rate = _pcm_units(body)
    elif response_format == "wav":
        ends, samples, rate = _wav_units(body)
    elif response_format in DECODED_FORMATS:
        ends, samples, rate = _decoded_units(body)
    else:
        raise AudioReadError(f"unknown response_format {response_format!r}")
    playable: list[AudioArrival] = []
    for arrival in arrivals:  # samples of every unit whose bytes have all arrived
        num_units = bisect.bisect_right(ends, arrival.num_bytes)
        playable.append(AudioArrival(arrival.time_s, samples[num_units - 1] / rate if num_units else 0.0))
    total = samples[-1] / rate if samples else 0.0
    return DecodedAudio(duration_s=total, arrivals=playable)


# Each decoder returns "units": the byte offset where unit i ends (sorted), the cumulative
# samples through unit i, and the sample rate.
Units = tuple[list[int], list[int], int]


def _pcm_units(body: bytes) -> Units:
    return _fixed_width_units(0, len(body), _PCM_BYTES_PER_SAMPLE, PCM_SAMPLE_RATE_HZ)


def _fixed_width_units(data_offset: int, body_len: int, frame_bytes: int, rate: int) -> Units:
    """One unit per 10 ms of samples (fine enough for a player, small enough for long streams)."""
    step = max(1, rate // 100)
    num_frames = max(0, body_len - data_offset) // frame_bytes
    counts = [*range(step, num_frames, step), num_frames] if num_frames else []
    return [data_offset + n * frame_bytes for n in counts], counts, rate


def _wav_units(body: bytes) -> Units:
    if len(body) < 12 or body[:4] != b"RIFF" or body[8:12] != b"WAVE":
        raise AudioReadError("not a RIFF/WAVE stream")
    offset, fmt = 12, None
    while offset + 8 <= len(body):
        chunk_id, size = body[offset : offset + 4], struct.unpack_from("<I", body, offset + 4)[0]
        if chunk_id == b"fmt ":
            _, channels, rate, _, block_align, _ = struct.unpack_from("<HHIIHH", body, offset + 8)
            fmt = (channels, rate, block_align)
        elif chunk_id == b"data":
            if fmt is None or fmt[2] == 0:
                raise AudioReadError("WAV data before a valid fmt chunk")
            return _fixed_width_units(offset + 8, len(body), fmt[2], fmt[1])
        offset += 8 + size + (size & 1)
    raise AudioReadError("WAV stream without a data chunk")


def _decoded_units(body: bytes) -> Units:
    import av

    try:
        with av.open(io.BytesIO(body), mode="r") as container:
            stream = container.streams.audio[0]
            starts: list[int] = []
            counts: list[int] = []
            total = 0
            for packet in container.demux(stream):
                frames = packet.decode()  # the flush packet (size 0) returns the decoder's last frames
                total += sum(frame.samples for frame in frames)
                if packet.size == 0:
                    continue
                starts.append(packet.pos if packet.pos is not None and packet.pos >= 0 else (starts or [0])[-1])
                counts.append(total)
            rate = stream.sample_rate or stream.codec_context.sample_rate
    except (av.FFmpegError, IndexError, ValueError) as exc:
        raise AudioReadError(f"cannot decode the body: {exc}") from exc
    if not counts:
        return [], [], rate or 1
    counts[-1] = total  # flushed samples come with the last bytes
    distinct = sorted(set(starts))
    # a packet is whole once the next unit (packet, or Ogg page) begins; the last ones at the end of the body
    next_start = dict(zip(distinct, [*distinct[1:], len(body)], strict=True))
    return _monotonic([next_start[start] for start in starts]), counts, rate


def _monotonic(ends: list[int]) -> list[int]:
    for i in range(1, len(ends)):
        ends[i] = max(ends[i], ends[i - 1])
    return ends


class SseAudioParser:
    """Unwraps ``stream_format="sse"``: feed body bytes, get audio bytes; an ``error`` event is remembered."""

    def __init__(self) -> None:
        self._pending = b""
        self.is_done = False
        self.error_code: str | None = None

    def feed(self, data: bytes) -> bytes:
        """Audio bytes carried by the events completed by ``data``."""
        self._pending += data
        audio = []
        while b"\n\n" in self._pending:
            event, self._pending = self._pending.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    audio.append(self._handle(line[5:].strip()))
        return b"".join(audio)

    def _handle(self, payload: bytes) -> bytes:
        try:
            event = json.loads(payload)
            kind = event.get("type")
            if kind == "speech.audio.delta":
                return base64.b64decode(event["audio"])
        except (ValueError, KeyError, AttributeError) as exc:
            raise AudioReadError(f"malformed SSE event: {exc}") from exc
        if kind == "speech.audio.done":
            self.is_done = True
        elif kind == "error":
            error = event.get("error") if isinstance(event.get("error"), dict) else event
            self.error_code = str(error.get("code") or "sse_error")
        return b""
